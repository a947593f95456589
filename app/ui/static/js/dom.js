// A small element builder: text is always set as text, never parsed as HTML.

export function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) {
      continue;
    }
    if (name === "class") {
      node.className = value;
    } else if (name === "text") {
      node.textContent = value;
    } else if (name.startsWith("on")) {
      node.addEventListener(name.slice(2), value);
    } else if (value === true) {
      node.setAttribute(name, "");
    } else {
      node.setAttribute(name, String(value));
    }
  }
  for (const child of children) {
    if (child !== null && child !== undefined) {
      node.append(child);
    }
  }
  return node;
}

export function byId(id) {
  return document.getElementById(id);
}

/** A status line under the header: a message, or nothing. */
export function showStatus(message, isError = false) {
  const status = byId("status");
  status.textContent = message || "";
  status.classList.toggle("error", Boolean(message) && isError);
}

/** Fill a <dl> with [term, value] pairs. */
export function fillList(list, pairs) {
  list.replaceChildren(...pairs.flatMap(([term, value]) => [el("dt", { text: term }), el("dd", { text: String(value) })]));
}

export function pretty(value) {
  return JSON.stringify(value, null, 2);
}
