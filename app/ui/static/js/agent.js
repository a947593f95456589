// Agent mode in the chat (llama-server's --tools, -ag, MCP servers): the server's tools come from GET /tools,
// the model's tool calls run through POST /tools, and each result goes back into the conversation as a
// "tool" message. Tools that write ask the user first.

import { apiFetch } from "./api.js";

/** The server's tools, or none where agent mode is off (GET /tools answers 403). */
export async function loadTools() {
  const response = await apiFetch("/tools");
  if (!response.ok) {
    return [];
  }
  const tools = await response.json();
  return Array.isArray(tools) ? tools : [];
}

/** The OpenAI function definitions the model is given. */
export function toolDefinitions(tools) {
  return tools.map((tool) => tool.definition);
}

/**
 * The request's tool_choice at each step of one answer: the user's choice first ("required": the first
 * answer must call a tool), then the model decides, and once the step budget is spent it must answer
 * in words ("none"), so that the loop always ends.
 */
export function toolChoiceFor(step, maxSteps, first) {
  if (step >= maxSteps) {
    return "none";
  }
  return step === 0 ? first : "auto";
}

/** One tool call run through POST /tools: the text the model reads back (a JSON error object on failure). */
export async function runTool(tools, call, signal) {
  const tool = tools.find((item) => item.tool === call.name);
  if (!tool) {
    return JSON.stringify({ error: `unknown tool "${call.name}"` });
  }
  let params;
  try {
    params = call.arguments ? JSON.parse(call.arguments) : {};
  } catch {
    return JSON.stringify({ error: "the tool call's arguments are not JSON" });
  }
  if (tool.permissions && tool.permissions.write
      && !window.confirm(`Let the model run ${call.name} on the server?\n\n${call.arguments}`)) {
    return JSON.stringify({ error: "the user did not allow this tool call" });
  }
  const response = await apiFetch("/tools", { method: "POST", body: JSON.stringify({ tool: call.name, params }), signal });
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  if (!response.ok || !body) {
    return JSON.stringify(body || { error: `HTTP ${response.status}` });
  }
  return typeof body.plain_text_response === "string" ? body.plain_text_response : JSON.stringify(body);
}
