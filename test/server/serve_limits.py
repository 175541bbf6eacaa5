# telos-run serve with runtime limits set at start: starts `TELOS_RUN serve ARTIFACT --engine cpu
# --port 0 --max-seq-len 64 --max-batch 2`, and prints what a client sees: the startup line about
# the limits, /v1/models' max_model_len, a prompt within the limit answered, one past it refused
# (status and message). Used by serve_cli.test.
#   python3 serve_limits.py TELOS_RUN ARTIFACT
import json
import re
import subprocess
import sys
import urllib.error
import urllib.request


def request(port, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def main():
    telos_run, artifact = sys.argv[1], sys.argv[2]
    server = subprocess.Popen([telos_run, "serve", artifact, "--engine", "cpu", "--port", "0",
                               "--max-seq-len", "64", "--max-batch", "2"],
                              stderr=subprocess.PIPE, text=True)
    try:
        port = None
        for line in server.stderr:
            if line.startswith("telos-run: runtime limits"):
                print(line.strip())
            m = re.search(r"on http://127\.0\.0\.1:(\d+)", line)
            if m:
                port = int(m.group(1))
                break
        if port is None:
            sys.exit("serve_limits.py: the server never said its port")
        status, models = request(port, "/v1/models")
        print("models", status, "max_model_len", models["data"][0]["max_model_len"])
        status, body = request(port, "/v1/completions",
                               {"model": models["data"][0]["id"], "prompt": list(range(1, 61)),
                                "max_tokens": 4, "temperature": 0})
        print("within", status, body.get("usage", {}).get("completion_tokens"))
        status, body = request(port, "/v1/completions",
                               {"model": models["data"][0]["id"], "prompt": list(range(1, 61)),
                                "max_tokens": 5, "temperature": 0})
        print("past", status, body["error"]["message"])
    finally:
        server.terminate()
        server.wait(timeout=60)


if __name__ == "__main__":
    main()
