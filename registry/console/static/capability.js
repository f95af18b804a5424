// Capability: every agent offering a capability id, each version with its status and effective
// dates, scopes, side effect and data regions (discovery plus each agent's version list, which also
// shows retired versions), and the active grants on it (GET /v1/audit/grants?skill=...).

import { api, TokenRefused, withQuery } from "./api.js";
import { el, filterForm, Pager, replace, time } from "./dom.js";
import { grantsTable } from "./grants.js";

const FIELDS = [
  { name: "id", label: "Capability id", placeholder: "invoice.pay" },
  { name: "tenant", label: "Tenant", placeholder: "any visible" },
];

function versionsTable(items) {
  return el("table", { class: "versions" },
    el("thead", {}, el("tr", {}, ["Ref", "Name", "Description", "Status", "Effective", "Sunset", "Scopes", "Side effect",
      "Approval", "Data regions", "Health"].map((h) => el("th", {}, h)))),
    el("tbody", {}, items.map((v) => el("tr", { class: `version ${v.status}` },
      el("td", {}, v.ref),
      el("td", {}, v.name),
      el("td", { class: "description" }, v.description),
      el("td", { class: "status" }, v.status),
      el("td", {}, v.effectiveAt ? time(v.effectiveAt) : "on publication"),
      el("td", {}, v.sunsetAt ? time(v.sunsetAt) : ""),
      el("td", {}, (v.scopes || []).join(" ") || "none"),
      el("td", {}, v.sideEffect),
      el("td", {}, v.requiresApproval ? "required" : "no"),
      el("td", {}, (v.dataRegions || []).join(" ") || "any"),
      el("td", {}, v.health ?? "")))));
}

/** Per agent on one discovery page: its public view (name, description) and every version of the
 * capability, retired ones included (newest first); an agent the caller cannot read is skipped. */
async function agentsOf(items, id, signal) {
  const agents = [...new Map(items.map((v) => [`${v.tenant}/${v.agentId}`, v])).values()];
  const quiet = (error) => { if (error instanceof TokenRefused || error.name === "AbortError") throw error; return null; };
  return Promise.all(agents.map(async (v) => {
    const base = `/v1/agents/${encodeURIComponent(v.tenant)}/${encodeURIComponent(v.agentId)}`;
    const [agent, versions] = await Promise.all([
      api(base, { signal }).catch(quiet),
      api(`${base}/skills/${encodeURIComponent(id)}/versions`, { signal }).catch(quiet),
    ]);
    const listed = items.filter((i) => i.tenant === v.tenant && i.agentId === v.agentId);
    const known = new Set((versions?.items || []).map((i) => i.ref));
    return { key: `${v.tenant}/${v.agentId}`, agent, versions: [...(versions?.items || []), ...listed.filter((i) => !known.has(i.ref))] };
  }));
}

function agentsView(entries) {
  return entries.map(({ key, agent, versions }) => el("section", { class: "agent" },
    el("h4", {}, el("code", {}, key), agent ? ` ${agent.name}` : ""),
    agent ? el("p", { class: "agent-description" }, agent.description) : null,
    versionsTable(versions)));
}

export async function render(root, params, ctx) {
  const id = params.id || "";
  const form = filterForm(FIELDS, params, (chosen) => ctx.go("capability", chosen));
  if (!id) {
    replace(root, el("h2", {}, "Capability"), el("p", { class: "hint" }, "Name a capability id to see its versions and who holds grants on it."), form);
    return;
  }
  const versions = el("div", { class: "results versions-box" });
  const grants = el("div", { class: "results grants-box" });
  const versionPager = new Pager(async (cursor) => {
    const page = await api(withQuery("/v1/capabilities", { skill: id, tenant: params.tenant, versions: "all", limit: 200, cursor }), { signal: ctx.signal });
    const entries = await agentsOf(page.items, id, ctx.signal);
    replace(versions, entries.length ? agentsView(entries) : el("p", { class: "empty" }, `No visible agent offers ${id}.`));
    return page;
  });
  const grantPager = new Pager(async (cursor) => {
    const page = await api(withQuery("/v1/audit/grants", { skill: id, active: "true", order: "expiry", cursor }), { signal: ctx.signal, needs: "audit:read" });
    replace(grants, page.items.length ? grantsTable(page.items, ctx) : el("p", { class: "empty" }, `No active grants on ${id}.`));
    return page;
  });
  replace(root,
    el("h2", {}, "Capability ", el("code", {}, id)), form,
    el("h3", {}, "Versions"), versionPager.node, versions,
    el("h3", {}, "Active grants"), grantPager.node, grants);
  await Promise.all([versionPager.first(), grantPager.first()]);
}
