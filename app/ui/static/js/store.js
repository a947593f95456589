// What the browser keeps between visits (localStorage): conversations, chat settings, the endpoint
// the Vertex snippets name. Nothing is sent anywhere but this server.

const CONVERSATIONS = "vertex-llama.conversations";

function read(key, fallback) {
  try {
    const value = JSON.parse(localStorage.getItem(key));
    return value === null ? fallback : value;
  } catch {
    return fallback;
  }
}

function write(key, value) {
  try {
    localStorage.setItem(key, JSON.stringify(value));
    return true;
  } catch {
    return false; // storage full (large images): the conversation still lives in the page
  }
}

export function loadConversations() {
  const conversations = read(CONVERSATIONS, []);
  return Array.isArray(conversations) ? conversations : [];
}

export function saveConversations(conversations) {
  return write(CONVERSATIONS, conversations);
}

export function newConversation() {
  const id = (crypto.randomUUID && crypto.randomUUID()) || String(Date.now()) + Math.random();
  return { id, title: "New chat", created: Date.now(), messages: [] };
}

export function loadObject(name) {
  const value = read(`vertex-llama.${name}`, {});
  return value && typeof value === "object" ? value : {};
}

export function saveObject(name, value) {
  write(`vertex-llama.${name}`, value);
}
