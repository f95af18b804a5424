// Building DOM nodes: every value becomes a text node or an attribute value, never markup.
// Event handlers are attached with addEventListener; an "on..." attribute is refused outright.

const SVG_NS = "http://www.w3.org/2000/svg";

function build(node, attrs, children) {
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (/^on/i.test(name) || name === "style") throw new Error(`attribute ${name} is not allowed`);
    if (name === "href" && !String(value).startsWith("#")) throw new Error("only in-page links");
    node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** el("td", {class: "x"}, "text", otherNode) */
export function el(tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
}

export function svg(tag, attrs, ...children) {
  return build(document.createElementNS(SVG_NS, tag), attrs, children);
}

export function on(node, type, handler) {
  node.addEventListener(type, handler);
  return node;
}

export function button(label, handler, attrs = {}) {
  return on(el("button", { type: "button", ...attrs }, label), "click", handler);
}

export function replace(parent, ...children) {
  parent.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
}

export function time(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? String(iso) : d.toISOString().replace(".000Z", "Z");
}

/** "in 4 min", "3 h ago": how far `iso` is from now. */
export function relative(iso) {
  const seconds = Math.round((new Date(iso).getTime() - Date.now()) / 1000);
  const abs = Math.abs(seconds);
  const amount = abs < 90 ? `${abs} s` : abs < 5400 ? `${Math.round(abs / 60)} min`
    : abs < 172800 ? `${Math.round(abs / 3600)} h` : `${Math.round(abs / 86400)} d`;
  // Rounded to 0 (Math.round(-0.3) is -0, which `>= 0` calls future) is the past: "0 s ago".
  return seconds > 0 ? `in ${amount}` : `${amount} ago`;
}

/** A filter form: fields [{name, label, type?, options?, placeholder?}], values from `values`. */
export function filterForm(fields, values, onApply) {
  const inputs = {};
  const form = el("form", { class: "filters" },
    fields.map((f) => {
      const id = `filter-${f.name}`;
      let input;
      if (f.options) {
        input = el("select", { id, name: f.name },
          f.options.map(([value, label]) => el("option", { value, selected: (values[f.name] ?? f.options[0][0]) === value }, label)));
      } else {
        input = el("input", { id, name: f.name, type: f.type || "text", placeholder: f.placeholder || "", autocomplete: "off" });
        input.value = values[f.name] ?? "";
      }
      inputs[f.name] = input;
      return el("label", { for: id }, el("span", {}, f.label), input);
    }),
    el("button", { type: "submit" }, "Apply"));
  on(form, "submit", (event) => {
    event.preventDefault();
    const chosen = {};
    for (const [name, input] of Object.entries(inputs)) {
      const value = input.value.trim();
      if (value !== "") chosen[name] = value;
    }
    onApply(chosen);
  });
  return form;
}

/** Previous / next buttons over the API's cursors: `pager.load(cursor)` fetches one page. */
export class Pager {
  constructor(load) {
    this.load = load;
    this.stack = [];      // cursors of the pages before the current one
    this.current = null;  // cursor of the current page (null: the first)
    this.next = null;
    this.node = el("div", { class: "pager" });
  }
  async first() { this.stack = []; this.current = null; await this.show(); }
  async show() {
    const page = await this.load(this.current);
    if (page === undefined) return;  // the load was abandoned (navigation, refused token)
    this.next = page.nextCursor ?? null;
    const number = this.stack.length + 1;
    replace(this.node,
      button("Previous page", () => { this.current = this.stack.pop() ?? null; this.show(); },
        { disabled: this.stack.length === 0, class: "prev" }),
      el("span", { class: "page-number" }, `page ${number}`),
      button("Next page", () => { this.stack.push(this.current); this.current = this.next; this.show(); },
        { disabled: !this.next, class: "next" }));
  }
}

/** A point in time shown as "3 min ago" / "in 4 min", the exact UTC time in its tooltip. */
export function when(iso) {
  if (!iso) return "";
  const exact = time(iso);
  if (Number.isNaN(new Date(iso).getTime())) return exact;
  return el("time", { class: "when", datetime: exact, title: exact }, relative(iso));
}

/** Identifiers (refs, actors, scopes, jtis) as unbreakable tokens: a line may break between two
 *  tokens, never inside one. */
export function tokens(values, separator = " ") {
  const list = (Array.isArray(values) ? values : [values]).filter((v) => v !== undefined && v !== null && v !== "");
  const nodes = [];
  list.forEach((value, index) => {
    if (index > 0) nodes.push(separator);
    nodes.push(el("span", { class: "token" }, value));
  });
  return nodes;
}

/** A long id shortened to its first characters, the whole id in the tooltip and a copy button. */
export function shortId(id, keep = 8) {
  if (!id) return "";
  const value = String(id);
  const copy = button("Copy", async (event) => {
    const control = event.currentTarget;
    try {
      await navigator.clipboard.writeText(value);
      control.textContent = "Copied";
    } catch {
      control.textContent = "Select";  // no clipboard access: show the whole id to select by hand
      control.previousSibling.textContent = value;
    }
  }, { class: "copy", title: `copy ${value}`, "aria-label": `copy trace id ${value}` });
  return el("span", { class: "short-id" },
    el("code", { class: "token", title: value }, value.length > keep ? `${value.slice(0, keep)}…` : value), copy);
}
