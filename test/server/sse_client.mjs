// A bare server-sent-events client over fetch, for tests that need to leave mid-stream or look at
// raw events (the openai SDK hides both).
export async function openStream(url, body, headers = {}) {
  const controller = new AbortController();
  const res = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json", ...headers },
    body: JSON.stringify({ ...body, stream: true }),
    signal: controller.signal,
  });
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  return {
    status: res.status,
    // The next event's data ("[DONE]" included), or null at the end of the response.
    async next() {
      for (;;) {
        const sep = buffer.indexOf("\n\n");
        if (sep >= 0) {
          const event = buffer.slice(0, sep);
          buffer = buffer.slice(sep + 2);
          if (!event.startsWith("data: ")) throw new Error(`not an SSE data event: ${event}`);
          return event.slice(6);
        }
        const { value, done } = await reader.read();
        if (done) return null;
        buffer += decoder.decode(value, { stream: true });
      }
    },
    leave() {
      controller.abort();
    },
  };
}
