// Starts `telos-run serve` on a free loopback port for one test file and always stops it: a
// SIGTERM (graceful, expected to exit 0) from the test's `after`, and a SIGKILL for anything
// still running when the test process exits, whatever happened.
import { spawn } from "node:child_process";

export const TELOS_RUN = process.env.TELOS_RUN;
export const MODELS = process.env.TELOS_TEST_MODELS;
// cpu in CI; TELOS_TEST_ENGINE=gpu runs the same suites on the GPU engine.
export const ENGINE = process.env.TELOS_TEST_ENGINE ?? "cpu";
if (!TELOS_RUN || !MODELS) throw new Error("set TELOS_RUN and TELOS_TEST_MODELS (ctest does)");

const live = new Set();
process.on("exit", () => {
  for (const proc of live) proc.kill("SIGKILL");
});

export async function startServer(artifact, extraArgs = []) {
  const proc = spawn(TELOS_RUN, ["serve", artifact, "--port", "0", "--engine", ENGINE, ...extraArgs], {
    stdio: ["ignore", "inherit", "pipe"],
  });
  live.add(proc);
  const exited = new Promise((resolve) => proc.on("exit", (code, signal) => resolve({ code, signal })));
  let stderr = "";
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the server did not start within 60 s:\n${stderr}`)), 60000);
    proc.stderr.on("data", (data) => {
      stderr += data;
      process.stderr.write(data);
      const m = / on (http:\/\/[0-9.]+:[0-9]+) /.exec(stderr);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    exited.then(({ code }) => {
      clearTimeout(timer);
      reject(new Error(`the server exited (${code}) before listening:\n${stderr}`));
    });
  });
  return {
    url,
    proc,
    exited,
    // SIGTERM and wait; SIGKILL if it takes more than 30 s. Resolves to {code, signal}.
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill("SIGTERM");
      const timer = setTimeout(() => proc.kill("SIGKILL"), 30000);
      const result = await exited;
      clearTimeout(timer);
      live.delete(proc);
      return result;
    },
  };
}

// POST JSON and parse the JSON answer: {status, body}.
export async function postJson(url, body, headers = {}) {
  const res = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {
    json = null;
  }
  return { status: res.status, body: json, text };
}

// The value of an unlabelled Prometheus sample.
export function metric(text, name) {
  const m = new RegExp(`^${name} ([0-9.eE+-]+)$`, "m").exec(text);
  if (!m) throw new Error(`no ${name} in /metrics:\n${text}`);
  return Number(m[1]);
}

export async function metrics(url) {
  const res = await fetch(`${url}/metrics`);
  return res.text();
}
