// What axe-core does not check, for tests/support/accessibility.py. WCAG 1.4.11 (non-text
// contrast): the edge of each text field, select and text area, and the focus ring of the
// control focus is on, each 3:1 against what is around it. WCAG 3.3.2 and 2.5.3: each of those
// fields has a label on the screen, and its accessible name says the label's words (an
// aria-label alone names a field for a screen reader and shows nothing to anyone else).
// Colours come as the page computes them:
// "rgb(…)", "rgba(…)", or "color(srgb r g b / a)" for a color-mix(); the backdrop of an
// element is its ancestors' backgrounds laid one on another, over white.
(() => {
  const colour = (text) => {
    let found = /^rgba?\(([^)]+)\)$/.exec(text);
    if (found) {
      const [r, g, b, a = 1] = found[1].split(/[ ,/]+/).map(Number);
      return [r / 255, g / 255, b / 255, a];
    }
    found = /^color\(srgb ([^)]+)\)$/.exec(text);
    if (found) {
      const [r, g, b, a = 1] = found[1].split(/[ /]+/).filter(Boolean).map(Number);
      return [r, g, b, a];
    }
    return null;
  };

  const over = (top, below) => [0, 1, 2].map((i) => top[i] * top[3] + below[i] * (1 - top[3])).concat(1);

  const backdrop = (element) => {
    const layers = [];
    for (let at = element; at; at = at.parentElement) {
      const found = colour(getComputedStyle(at).backgroundColor);
      if (found && found[3] > 0) layers.push(found);
      if (found && found[3] >= 1) break;
    }
    return layers.reverse().reduce((below, top) => over(top, below), [1, 1, 1, 1]);
  };

  const linear = (v) => (v <= 0.04045 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4);
  const luminance = ([r, g, b]) => 0.2126 * linear(r) + 0.7152 * linear(g) + 0.0722 * linear(b);

  const contrast = (a, b) => {
    const [light, dark] = [luminance(a), luminance(b)].sort((x, y) => y - x);
    return Math.round(((light + 0.05) / (dark + 0.05)) * 100) / 100;
  };

  const describe = (element) => element.outerHTML.slice(0, 100);
  const squeeze = (text) => text.replace(/\s+/g, " ").trim();

  // The words of `element` drawn on the screen: not those of a visually hidden part (clipped
  // to a pixel), which only a screen reader reads.
  const shownText = (element) => {
    const walker = document.createTreeWalker(element, NodeFilter.SHOW_TEXT);
    let text = "";
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const box = node.parentElement.getBoundingClientRect();
      if (box.width > 1 && box.height > 1) text += node.textContent;
    }
    return squeeze(text);
  };

  // A field's accessible name, as far as these pages name fields: aria-labelledby, else
  // aria-label, else its labels' whole text.
  const nameOf = (field) => {
    const ids = field.getAttribute("aria-labelledby");
    if (ids) return squeeze(ids.split(/\s+/).map((id) => document.getElementById(id)?.textContent ?? "").join(" "));
    return squeeze(field.getAttribute("aria-label") ?? [...field.labels].map((label) => label.textContent).join(" "));
  };
  const FIELDS = "input:not([type=checkbox]):not([type=radio]):not([type=hidden]), select, textarea";
  let reached = new WeakSet();

  window.beyondAxe = {
    // Each visible field: its border against the backdrop outside it and its own background.
    controlBorders() {
      const problems = [];
      for (const field of document.querySelectorAll(FIELDS)) {
        if (!field.checkVisibility() || field.disabled) continue;
        const style = getComputedStyle(field);
        const edge = colour(style.borderTopColor);
        if (!edge || parseFloat(style.borderTopWidth) === 0) {
          problems.push(`${describe(field)}: no border`);
          continue;
        }
        const outside = backdrop(field.parentElement);
        const inside = over(colour(style.backgroundColor) ?? [0, 0, 0, 0], outside);
        const ratio = Math.min(contrast(over(edge, outside), outside), contrast(over(edge, inside), inside));
        if (ratio < 3) problems.push(`${describe(field)}: border ${ratio}:1`);
      }
      return problems;
    },

    // Each visible field: a label of its own shows on the screen (a placeholder goes once
    // typed in), and the field's name holds the words the label shows.
    visibleLabels() {
      const problems = [];
      for (const field of document.querySelectorAll(FIELDS)) {
        if (!field.checkVisibility()) continue;
        const shown = [...field.labels].map(shownText).filter(Boolean);
        const name = nameOf(field).toLowerCase();
        if (!shown.length) problems.push(`${describe(field)}: no visible label`);
        else if (!shown.some((words) => name.includes(words.toLowerCase()))) {
          problems.push(`${describe(field)}: its name "${name}" does not say "${shown[0]}"`);
        }
      }
      return problems;
    },

    // Focus at the start of the document, on a mark Tab then leaves; nothing reached yet.
    // (In a modal dialog the page is inert: Tab starts from the control focus is on.)
    startAtTheTop() {
      reached = new WeakSet();
      const start = Object.assign(document.createElement("span"), { tabIndex: -1, id: "focus-walk-start" });
      document.body.prepend(start);
      start.focus();
    },

    done() {
      document.getElementById("focus-walk-start")?.remove();
    },

    // The control focus is on: its ring (an outline) at least 2 px wide and 3:1 against the
    // backdrop it is drawn on, outside the control. `again`: focus is back where the walk
    // has been, or left the controls (on the document itself).
    focusRing() {
      const focused = document.activeElement;
      if (!focused || focused === document.body || reached.has(focused)) return { again: true, problem: null };
      reached.add(focused);
      const style = getComputedStyle(focused);
      const ring = colour(style.outlineColor);
      if (style.outlineStyle === "none" || parseFloat(style.outlineWidth) < 2 || !ring) {
        const outline = `${style.outlineStyle} ${style.outlineWidth}`;
        return { again: false, problem: `${describe(focused)}: no focus ring (outline ${outline})` };
      }
      const behind = backdrop(focused.parentElement);
      const ratio = contrast(over(ring, behind), behind);
      return { again: false, problem: ratio < 3 ? `${describe(focused)}: focus ring ${ratio}:1` : null };
    },
  };
})();
