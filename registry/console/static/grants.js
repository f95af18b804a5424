// Grants: who holds which scopes on which capability through delegation tickets, on whose behalf,
// since when and until when (GET /v1/audit/grants), with the delegation chain of each ticket and
// revocation (POST /v1/tickets/{jti}/revoke) for registry:admin holders.

import { api, holds, TokenRefused, withQuery } from "./api.js";
import { button, el, filterForm, Pager, replace, tokens, when } from "./dom.js";

const FIELDS = [
  { name: "skill", label: "Capability", placeholder: "invoice.pay" },
  { name: "actor", label: "Actor", placeholder: "tenant/sub or sub" },
  { name: "scope", label: "Scope", placeholder: "invoice:write" },
  { name: "active", label: "Status", options: [["true", "active"], ["false", "expired, revoked or retired"]] },
  { name: "order", label: "Sort", options: [["expiry", "expiry, soonest first"], ["issued", "issued, oldest first"]] },
  { name: "limit", label: "Per page", options: [["100", "100"], ["50", "50"], ["500", "500"], ["1000", "1000"]] },
];

/** The delegation chain of a ticket, first delegator first: its `act` claim unnested. */
export function actors(act) {
  const chain = [];
  for (let node = act; node && typeof node === "object" && chain.length < 32; node = node.act) {
    if (node.sub !== undefined) chain.unshift(String(node.sub));
  }
  return chain;
}

function chainView(grant) {
  const steps = [];
  if (grant.onBehalfOf) steps.push(el("li", {}, el("span", { class: "role" }, "on behalf of "), grant.onBehalfOf));
  actors(grant.act).forEach((actor, index) => {
    steps.push(el("li", {}, el("span", { class: "role" }, index === 0 ? "minted by " : "re-delegated by "), actor));
  });
  steps.push(el("li", {}, el("span", { class: "role" }, "to agent "), grant.audience));
  return el("div", { class: "chain-detail" },
    el("ol", { class: "delegation" }, steps),
    el("p", {}, `ticket ${grant.jti}, depth ${grant.depth} of at most ${grant.depth + grant.maxDepth}`,
      grant.parent ? `, parent ticket ${grant.parent}` : ", first ticket (no parent)"));
}

function revokeControl(grant, cell, row, ctx) {
  const start = () => replace(cell,
    el("span", { class: "confirm" }, `Revoke ${grant.jti} and every ticket delegated from it?`),
    button("Confirm revoke", confirm, { class: "danger confirm-revoke" }),
    button("Cancel", reset));
  const reset = () => replace(cell, button("Revoke…", start, { class: "revoke" }));
  async function confirm() {
    replace(cell, el("span", {}, "Revoking…"));
    try {
      const result = await api(`/v1/tickets/${encodeURIComponent(grant.jti)}/revoke`, { method: "POST", signal: ctx.signal });
      const revoked = Array.isArray(result?.revoked) ? result.revoked.length : 1;
      row.classList.add("revoked");
      row.querySelector(".status").textContent = "revoked";
      replace(cell, el("span", { class: "done" }, `Revoked (${revoked} ticket${revoked === 1 ? "" : "s"})`));
    } catch (error) {
      if (error.name === "AbortError" || error instanceof TokenRefused) return;
      replace(cell, el("span", { class: "failed" }, `Not revoked: ${error.message}`), button("Retry", start));
    }
  }
  reset();
}

/** A table of grants; capability refs link to the capability page. */
export function grantsTable(items, ctx) {
  const admin = holds("registry:admin");
  const body = el("tbody");
  const rows = document.createDocumentFragment();
  for (const grant of items) {
    const skill = String(grant.ref).split("/").pop().split("@")[0];
    const detail = el("tr", { class: "detail", hidden: true }, el("td", { colspan: 10 }, chainView(grant)));
    const actionCell = el("td", { class: "actions" });
    const row = el("tr", { class: grant.active ? "grant" : "grant inactive", "data-jti": grant.jti },
      el("td", { class: "ref" }, el("a", { href: `#capability?id=${encodeURIComponent(skill)}` }, grant.ref)),
      el("td", { class: "token" }, grant.actor),
      el("td", { class: "token" }, grant.onBehalfOf ?? "—"),
      el("td", { class: "token" }, grant.audience),
      el("td", {}, tokens(grant.scopes || [])),
      el("td", {}, (grant.resources || []).length ? tokens(grant.resources) : "any"),
      el("td", { class: "time" }, when(grant.issuedAt)),
      el("td", { class: "time" }, when(grant.expiresAt)),
      el("td", { class: "status" }, grant.active ? "active" : "inactive"),
      actionCell);
    const toggle = button("Chain", () => { detail.hidden = !detail.hidden; }, { class: "show-chain" });
    actionCell.append(toggle);
    if (admin && grant.active) {
      const revokeCell = el("span", { class: "revoke-cell" });
      actionCell.append(revokeCell);
      revokeControl(grant, revokeCell, row, ctx);
    }
    rows.append(row, detail);
  }
  body.append(rows);
  return el("table", { class: "grants" },
    el("thead", {}, el("tr", {}, ["Capability", "Actor", "On behalf of", "Audience", "Scopes", "Resources",
      "Issued", "Expires", "Status", ""].map((h) => el("th", {}, h)))),
    body);
}

export async function render(root, params, ctx) {
  const filters = { active: "true", order: "expiry", limit: "100", ...params };
  // Only the form's fields go to the API: a name the hash carries besides them (#grants?foo=1) would
  // be refused as an unknown query parameter (400).
  const query = Object.fromEntries(FIELDS.map((f) => f.name).filter((n) => filters[n]).map((n) => [n, filters[n]]));
  const results = el("div", { class: "results" });
  const pager = new Pager(async (cursor) => {
    const page = await api(withQuery("/v1/audit/grants", { ...query, cursor }), { signal: ctx.signal, needs: "audit:read" });
    replace(results, page.items.length
      ? grantsTable(page.items, ctx)
      : el("p", { class: "empty" }, "No grants match these filters."));
    return page;
  });
  replace(root,
    el("h2", {}, "Grants"),
    el("p", { class: "hint" }, "Who holds which scopes on which capability through delegation tickets, on whose behalf, since when."),
    filterForm(FIELDS, filters, (chosen) => ctx.go("grants", chosen)),
    pager.node, results);
  await pager.first();
}
