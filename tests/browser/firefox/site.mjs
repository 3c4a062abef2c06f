// The static site in Firefox, for tests/browser/test_site_firefox.py: opens every page from file:// with every
// network request aborted (file: and data: URLs are not network), waits until the page has drawn everything, then
// moves each control once to a neighbouring value. The page-side snippets (ready, drawn, controls, signature, move)
// are spanviz/site/drive.py's, passed in the plan file, so Chromium's test and this one read the page the same way.
//
//   node site.mjs PLAN.json   → prints one JSON object: {page: {first_ms, figures, moved, errors, blocked}}
import { readFileSync } from "node:fs";
import puppeteer from "puppeteer-core";

const plan = JSON.parse(readFileSync(process.argv[2], "utf8"));
const call = (page, fn, ...args) => page.evaluate(`(${fn})(...${JSON.stringify(args)})`);
const browser = await puppeteer.launch({ browser: "firefox", executablePath: plan.firefox, headless: true });
const out = {};
try {
  for (const name of plan.pages) {
    const page = await browser.newPage();
    const errors = [];
    const blocked = [];
    page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
    page.on("pageerror", (e) => errors.push(String(e)));
    await page.setRequestInterception(true);
    page.on("request", (r) => {
      if (/^(file|data|blob):/.test(r.url())) r.continue();
      else { blocked.push(r.url()); r.abort(); }
    });
    await page.goto(`file://${plan.site}/${name}.html`);
    await page.waitForFunction(`(${plan.js.ready})()`, { timeout: 120000 });
    const first = await page.evaluate("window.__sv.first");
    const figures = await call(page, plan.js.drawn);
    const moved = [];
    for (const c of await call(page, plan.js.controls)) {
      const before = await call(page, plan.js.signature, [c.section]);
      const to = c.index + 1 < c.n ? c.index + 1 : c.index - 1;
      await call(page, plan.js.move, [c.section, c.name, to]);
      const after = await call(page, plan.js.signature, [c.section]);
      moved.push({ control: `${c.section}:${c.name}`, changed: Object.keys(after).some((k) => after[k] !== before[k]) });
    }
    errors.push(...(await page.evaluate("window.__sv.errors")));
    out[name] = { first_ms: first, figures, moved, errors, blocked };
    await page.close();
  }
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
