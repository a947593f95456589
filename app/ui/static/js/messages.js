// A conversation's stored messages as /v1/chat/completions takes them: images as OpenAI image parts, the
// model's tool calls, and the tools' results (agent mode).

/** A stored message as the API takes it: tool calls and tool results included. */
export function apiMessage(message) {
  if (message.role === "tool") {
    return { role: "tool", tool_call_id: message.tool_call_id, content: message.content };
  }
  const entry = { role: message.role, content: apiContent(message) };
  if (message.tool_calls && message.tool_calls.length) {
    entry.tool_calls = message.tool_calls.map((call) => ({
      id: call.id, type: "function", function: { name: call.name, arguments: call.arguments || "{}" },
    }));
  }
  return entry;
}

function apiContent(message) {
  if (!message.image) {
    return message.content;
  }
  const parts = [{ type: "image_url", image_url: { url: message.image } }];
  return message.content ? [{ type: "text", text: message.content }, ...parts] : parts;
}
