// The session's branding (GET /v1/portal/session): the SaaS's name, logo and accent
// colour, passed when the session was opened. The logo is only ever an <img src>, and
// the colour only a CSS custom property set through the CSSOM (the CSP allows no
// inline style), each checked here once more against the API's own rules.
import { $ } from "./portal-ctx.js";

const COLOUR = /^#(?:[0-9a-f]{3}|[0-9a-f]{6})$/i;
const LOGO = /^(?:https:\/\/|data:image\/(?:png|jpeg|gif|webp|svg\+xml);base64,)/;
const DEFAULT_NAME = "Webhooks";

export function applyBranding(branding) {
  const b = branding || {};
  const name = b.name || DEFAULT_NAME;
  $("p-name").textContent = name;
  document.title = name;
  const logo = $("p-logo");
  if (b.logo_url && LOGO.test(b.logo_url)) {
    logo.src = b.logo_url;
    logo.alt = `${name} logo`;
    logo.hidden = false;
  } else {
    logo.removeAttribute("src");
    logo.hidden = true;
  }
  const root = document.documentElement.style;
  if (b.accent_color && COLOUR.test(b.accent_color)) root.setProperty("--accent", b.accent_color);
  else root.removeProperty("--accent");
}
