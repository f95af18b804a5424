// Chain: the latest signed checkpoint (GET /v1/audit/checkpoints/latest), its Ed25519 signature
// checked in this browser against the registry's JWKS (WebCrypto), and the server's verification of
// the tenant's hash chain up to its head (GET /v1/audit/chain), naming the first bad chainSeq when it fails.

import { api, TokenRefused } from "./api.js";
import { button, el, replace, time } from "./dom.js";

const CHECKPOINT_TYP = "capreg-checkpoint+jwt";

function b64urlBytes(text) {
  const base64 = text.replace(/-/g, "+").replace(/_/g, "/") + "=".repeat((4 - (text.length % 4)) % 4);
  return Uint8Array.from(atob(base64), (c) => c.charCodeAt(0));
}

const decodeJson = (part) => JSON.parse(new TextDecoder().decode(b64urlBytes(part)));

/**
 * Verify a checkpoint's compact JWS with the JWKS: header typ and alg, kid in the key set, the
 * Ed25519 signature, and the signed seq, hash, at, root and chains equal to the ones beside it.
 * Resolves {ok: true} / {ok: false, why}, or {ok: null, why} when this browser cannot check Ed25519.
 */
export async function verifyInBrowser(checkpoint, jwks) {
  if (!globalThis.crypto?.subtle) return { ok: null, why: "WebCrypto is unavailable here (not a secure context)" };
  const parts = String(checkpoint.signature).split(".");
  if (parts.length !== 3) return { ok: false, why: "the signature is not a compact JWS" };
  let header, payload;
  try { header = decodeJson(parts[0]); payload = decodeJson(parts[1]); } catch { return { ok: false, why: "undecodable JWS" }; }
  if (header.typ !== CHECKPOINT_TYP || header.alg !== "EdDSA") return { ok: false, why: `header must be typ ${CHECKPOINT_TYP}, alg EdDSA` };
  const jwk = (jwks.keys || []).find((k) => k.kid === header.kid && k.kty === "OKP" && k.crv === "Ed25519");
  if (!jwk) return { ok: false, why: `signing key ${header.kid} is not in the registry's key set` };
  let key;
  try {
    key = await crypto.subtle.importKey("jwk", { kty: "OKP", crv: "Ed25519", x: jwk.x }, { name: "Ed25519" }, false, ["verify"]);
  } catch {
    return { ok: null, why: "this browser's WebCrypto has no Ed25519" };
  }
  const valid = await crypto.subtle.verify({ name: "Ed25519" }, key, b64urlBytes(parts[2]),
    new TextEncoder().encode(`${parts[0]}.${parts[1]}`));
  if (!valid) return { ok: false, why: "the signature does not verify" };
  if (payload.seq !== checkpoint.seq || payload.hash !== checkpoint.hash || payload.at !== checkpoint.at
      || (payload.root ?? null) !== (checkpoint.root ?? null) || (payload.chains ?? null) !== (checkpoint.chains ?? null)) {
    return { ok: false, why: "seq, hash, at, root or chains differ from the signed ones" };
  }
  if (header.kid !== checkpoint.kid) return { ok: false, why: "kid differs from the signature's key id" };
  return { ok: true };
}

function field(label, value) {
  return [el("dt", {}, label), el("dd", {}, value)];
}

function verdict(ok, good, bad) {
  return el("p", { class: ok ? "verdict ok" : "verdict bad" }, ok ? good : bad);
}

export async function render(root, params, ctx) {
  const opts = { signal: ctx.signal, needs: "audit:read" };
  const [checkpoint, jwks] = await Promise.all([
    api("/v1/audit/checkpoints/latest", { signal: ctx.signal }),
    api("/.well-known/jwks.json", { signal: ctx.signal }),
  ]);
  const browser = await verifyInBrowser(checkpoint, jwks);
  const signatureBox = el("section", { class: "signature" },
    el("h3", {}, "Latest signed checkpoint"),
    el("dl", {}, field("seq", String(checkpoint.seq)), field("hash", checkpoint.hash),
      field("root", checkpoint.root ?? "(none: signed before chains per tenant)"), field("chains", String(checkpoint.chains ?? "")),
      field("signed at", time(checkpoint.at)),
      field("key id", checkpoint.kid)),
    browser.ok === null
      ? el("p", { class: "verdict unknown" }, `Not checked in the browser: ${browser.why}; see the registry's check below.`)
      : verdict(browser.ok, "Signature verified in this browser (Ed25519, WebCrypto) with the registry's published keys.",
        `Signature INVALID: ${browser.why}.`));
  const chainBox = el("section", { class: "chain-status" }, el("h3", {}, "Hash chain"), el("p", { class: "loading" }, "Verifying the chain…"));
  replace(root, el("h2", {}, "Audit chain"), signatureBox, chainBox,
    button("Check again", () => ctx.go("chain", { at: String(Date.now()) }), { class: "recheck" }));
  try {
    const report = await api("/v1/audit/chain", opts);
    const signed = report.checkpoint;
    replace(chainBox, el("h3", {}, "Hash chain"),
      report.verified
        ? verdict(true, `Chain ${report.chain} verified: ${report.chainSeq} entries, to chainSeq ${report.chainSeq} (seq ${report.headSeq})`
          + (signed ? `; the latest checkpoint was signed at seq ${signed.seq}.` : "; no checkpoint signed yet."), "")
        : el("div", { class: "broken" },
          verdict(false, "", `Chain BROKEN: first bad chainSeq ${report.firstBadChainSeq ?? "?"} (seq ${report.firstBadSeq ?? "?"}).`),
          el("p", { class: "problem" }, report.problem ?? "")),
      el("p", { class: "hint" }, report.checkpointSignatureValid === null ? "The registry has signed no checkpoint yet."
        : `The registry's own check of the checkpoint signature: ${report.checkpointSignatureValid ? "valid" : "INVALID"}.`));
  } catch (error) {
    if (error instanceof TokenRefused || error.name === "AbortError") throw error;
    replace(chainBox, el("h3", {}, "Hash chain"), el("p", { class: "failed" }, `Not verified: ${error.message}`));
  }
}
