// The playground web page (§T14.3): the contract on the real web entry, and elements that
// each hold only their value.

import { addAppductListener, appductClient, getAppductState, getSessionAlias } from "@appduct/sdk/web/enabled";

import { registerPlayground } from "../src/playground.js";

const playground = registerPlayground(appductClient);

function element(id: string): HTMLElement {
  const found = document.getElementById(id);
  if (!found) throw new Error(`the page has no #${id}`);
  return found;
}

const render = (): void => {
  element("call-count").textContent = String(playground.count);
  element("connection-state").textContent = getAppductState();
  element("session-alias").textContent = getSessionAlias() ?? "none";
};

playground.onCountChange(render);
addAppductListener("stateChange", render);
addAppductListener("sessionChange", (e) => {
  element("last-session-event").textContent = e.reason === undefined ? e.type : `${e.type} (${e.reason})`;
  render();
});
element("ping-button").addEventListener("click", () => {
  element("last-ping").textContent = String(playground.ping());
});
render();
