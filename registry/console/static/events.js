// Events: the tenant's audit log (GET /v1/audit/events) with its filters and cursors, denials
// highlighted, NDJSON export of the current filter, and allowed vs denied events per hour
// (GET /v1/audit/events/hourly) drawn as SVG.

import { api, TokenRefused, withQuery } from "./api.js";
import { button, el, filterForm, Pager, replace, shortId, svg, time, tokens, when } from "./dom.js";

const FIELDS = [
  { name: "outcome", label: "Outcome", options: [["", "any"], ["denied", "denied"], ["allowed", "allowed"]] },
  { name: "type", label: "Type", placeholder: "ticket.denied" },
  { name: "actor", label: "Actor", placeholder: "tenant/sub or sub" },
  { name: "skill", label: "Capability", placeholder: "invoice.pay" },
  { name: "scope", label: "Scope", placeholder: "invoice:write" },
  { name: "since", label: "Since", placeholder: "2026-05-01T00:00:00Z" },
  { name: "until", label: "Until", placeholder: "2026-05-02T00:00:00Z" },
  { name: "limit", label: "Per page", options: [["100", "100"], ["50", "50"], ["500", "500"], ["1000", "1000"]] },
];
const FILTER_NAMES = ["outcome", "type", "actor", "skill", "scope", "since", "until"];

function eventsTable(items) {
  const body = el("tbody");
  const rows = document.createDocumentFragment();
  for (const e of items) {
    rows.append(el("tr", { class: e.outcome === "denied" ? "event denied" : "event" },
      el("td", { class: "token" }, String(e.seq)),
      el("td", { class: "time" }, when(e.at)),
      el("td", { class: "token" }, e.type),
      el("td", { class: "outcome token" }, e.outcome),
      el("td", { class: "token" }, e.reason ?? ""),
      el("td", { class: "token" }, `${e.actorTenant ?? "?"}/${e.actor ?? "?"}`),
      el("td", { class: "token" }, e.onBehalfOf ?? ""),
      el("td", { class: "ref" }, e.ref ?? ""),
      el("td", {}, tokens(e.scopes || [])),
      el("td", { class: "trace" }, shortId(e.traceId))));
  }
  body.append(rows);
  return el("table", { class: "events" },
    el("thead", {}, el("tr", {}, ["Seq", "At", "Type", "Outcome", "Reason", "Actor", "On behalf of", "Ref", "Scopes", "Trace"]
      .map((h) => el("th", {}, h)))),
    body);
}

/** Stacked bars, one per hour: allowed below, denied on top, so a spike of refusals stands out. */
export function hourlyChart(hours) {
  const width = 1200, height = 170, top = 12, bottom = 28, left = 44;
  const max = Math.max(1, ...hours.map((h) => h.allowed + h.denied));
  const slot = (width - left) / Math.max(1, hours.length);
  const scale = (n) => (n / max) * (height - top - bottom);
  const bars = hours.map((h, i) => {
    const x = left + i * slot + 1;
    const w = Math.max(1, slot - 2);
    const allowedHeight = scale(h.allowed), deniedHeight = scale(h.denied);
    const base = height - bottom;
    const label = `${time(h.hour)}: ${h.allowed} allowed, ${h.denied} denied`;
    return svg("g", { class: "hour" },
      svg("title", {}, label),
      svg("rect", { class: "allowed", x, y: base - allowedHeight, width: w, height: allowedHeight }),
      svg("rect", { class: "denied", x, y: base - allowedHeight - deniedHeight, width: w, height: deniedHeight }));
  });
  const ticks = hours.map((h, i) => (i % 6 === 0
    ? svg("text", { class: "tick", x: left + i * slot, y: height - 10 }, time(h.hour).slice(5, 16).replace("T", " "))
    : null)).filter(Boolean);
  const totals = hours.reduce((t, h) => ({ allowed: t.allowed + h.allowed, denied: t.denied + h.denied }), { allowed: 0, denied: 0 });
  return el("figure", { class: "chart" },
    svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "allowed and denied events per hour" },
      svg("line", { class: "axis", x1: left, y1: height - bottom, x2: width, y2: height - bottom }),
      svg("text", { class: "tick", x: 2, y: top + 4 }, String(max)),
      svg("text", { class: "tick", x: 2, y: height - bottom }, "0"),
      bars, ticks),
    el("figcaption", {},
      el("span", { class: "legend allowed" }, `allowed ${totals.allowed}`), " ",
      el("span", { class: "legend denied" }, `denied ${totals.denied}`),
      ` per UTC hour, ${time(hours[0]?.hour)} to ${time(hours.at(-1)?.hour)}`));
}

async function exportNdjson(filters, status, signal) {
  status.textContent = "Exporting…";
  try {
    const response = await api(withQuery("/v1/audit/events", filters), { accept: "application/x-ndjson", raw: true, signal, needs: "audit:read" });
    const blob = await response.blob();
    const lines = (await blob.text()).split("\n").filter(Boolean).length;
    const link = el("a", { download: "capreg-audit-events.ndjson" });
    link.href = URL.createObjectURL(blob);  // a blob: URL of this origin, set as a property
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(link.href), 10000);
    status.textContent = `Exported ${lines} event${lines === 1 ? "" : "s"}.`;
  } catch (error) {
    if (error instanceof TokenRefused || error.name === "AbortError") return;
    status.textContent = `Export failed: ${error.message}`;
  }
}

export async function render(root, params, ctx) {
  const filters = { limit: "100", ...params };
  const query = Object.fromEntries(FILTER_NAMES.filter((n) => filters[n]).map((n) => [n, filters[n]]));
  const chart = el("div", { class: "chart-box" }, el("p", { class: "loading" }, "Loading chart…"));
  const results = el("div", { class: "results" });
  const exportStatus = el("span", { class: "export-status", role: "status" });
  const pager = new Pager(async (cursor) => {
    const page = await api(withQuery("/v1/audit/events", { ...query, limit: filters.limit, cursor }), { signal: ctx.signal, needs: "audit:read" });
    replace(results, page.items.length ? eventsTable(page.items) : el("p", { class: "empty" }, "No events match these filters."));
    return page;
  });
  replace(root,
    el("h2", {}, "Events"),
    filterForm(FIELDS, filters, (chosen) => ctx.go("events", chosen)),
    chart,
    el("div", { class: "toolbar" },
      button("Export NDJSON (this filter)", () => exportNdjson(query, exportStatus, ctx.signal), { class: "export" }),
      exportStatus),
    pager.node, results);
  const hourly = api(withQuery("/v1/audit/events/hourly", query), { signal: ctx.signal, needs: "audit:read" })
    .then((data) => replace(chart, hourlyChart(data.hours)))
    .catch((error) => {
      if (error instanceof TokenRefused || error.name === "AbortError") return;
      replace(chart, el("p", { class: "failed" }, `No chart: ${error.message}`));
    });
  await Promise.all([pager.first(), hourly]);
}
