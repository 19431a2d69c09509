// Runs the reference tools (Pi 0.85.0) on the cases in a JSON file and prints their outputs.
// Used by scripts/compare_reference.py; see that file for how to install the reference.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [root, casesFile] = process.argv.slice(2);
const toolsDir = path.join(root, "node_modules/@earendil-works/pi-coding-agent/dist/core/tools");
const tools = await import(pathToFileURL(path.join(toolsDir, "index.js")).href);
const diffs = await import(pathToFileURL(path.join(toolsDir, "edit-diff.js")).href);
const ai = await import(pathToFileURL(path.join(root, "node_modules/@earendil-works/pi-ai/dist/utils/validation.js")).href);
const api = { ...tools, ...diffs };
const factories = {
  read: api.createReadTool, write: api.createWriteTool, edit: api.createEditTool,
  ls: api.createLsTool, grep: api.createGrepTool, find: api.createFindTool, bash: api.createBashTool,
};

const out = [];
for (const c of JSON.parse(fs.readFileSync(casesFile, "utf8"))) {
  try {
    if (c.fn) {
      out.push({ ok: true, value: api[c.fn](...c.args) });
      continue;
    }
    if (c.validate) {
      const tool = factories[c.validate](c.dir, {});
      out.push({ ok: true, value: ai.validateToolArguments(tool, { type: "toolCall", id: "c", name: c.validate, arguments: c.args }) });
      continue;
    }
    const tool = factories[c.tool](c.dir, {});
    const args = tool.prepareArguments ? tool.prepareArguments(c.args) : c.args;
    const result = await tool.execute("call", args, undefined, undefined);
    out.push({
      ok: true,
      content: result.content.map((b) => (b.type === "text" ? { type: "text", text: b.text } : { type: b.type, mimeType: b.mimeType })),
      details: result.details ?? null,
    });
  } catch (error) {
    out.push({ ok: false, error: String(error && error.message !== undefined ? error.message : error) });
  }
}
process.stdout.write(JSON.stringify(out));
