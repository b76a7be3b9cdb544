"""Runs, stops, removes and lists pod sandboxes through containerd's CRI plugin, as kubelet does.

Usage: /usr/bin/python3 cri_pod.py run SOCKET NAME NAMESPACE UID [KEY=VALUE ...]
       /usr/bin/python3 cri_pod.py stop SOCKET ID
       /usr/bin/python3 cri_pod.py remove SOCKET ID
       /usr/bin/python3 cri_pod.py list SOCKET
`run` prints the sandbox id; `list` prints one JSON object per sandbox and line:
{"id", "name", "namespace", "uid", "attempt", "state" ("SANDBOX_READY" / "SANDBOX_NOTREADY"),
"created_at" (ns), "labels", "annotations"}. On failure: the RPC, gRPC status code and
containerd's message on stderr, exit status 1. `SHOAL_CRI_TIMEOUT` (seconds, default 120)
bounds each call.

Like cri_pull.py this runs under Debian's python3 with python3-grpcio and encodes the runtime.v1
messages by hand (k8s.io/cri-api pkg/apis/runtime/v1/api.proto):
  RunPodSandboxRequest   { PodSandboxConfig config = 1; string runtime_handler = 2; }
  RunPodSandboxResponse  { string pod_sandbox_id = 1; }
  PodSandboxConfig       { PodSandboxMetadata metadata = 1; string hostname = 2;
                           string log_directory = 3; ...; map<string,string> labels = 6;
                           map<string,string> annotations = 7; LinuxPodSandboxConfig linux = 8; }
  PodSandboxMetadata     { string name = 1; string uid = 2; string namespace = 3; uint32 attempt = 4; }
  LinuxPodSandboxConfig  { string cgroup_parent = 1; LinuxSandboxSecurityContext security_context = 2; }
  LinuxSandboxSecurityContext { NamespaceOption namespace_options = 1; ... }
  NamespaceOption        { NamespaceMode network = 1; NamespaceMode pid = 2; NamespaceMode ipc = 3; }
  NamespaceMode          { POD = 0; CONTAINER = 1; NODE = 2; TARGET = 3; }
  Stop/RemovePodSandboxRequest { string pod_sandbox_id = 1; }  (empty responses)
  ListPodSandboxRequest  { PodSandboxFilter filter = 1; }
  ListPodSandboxResponse { repeated PodSandbox items = 1; }
  PodSandbox             { string id = 1; PodSandboxMetadata metadata = 2; PodSandboxState state = 3;
                           int64 created_at = 4; map<string,string> labels = 5;
                           map<string,string> annotations = 6; string runtime_handler = 7; }
  PodSandboxState        { SANDBOX_READY = 0; SANDBOX_NOTREADY = 1; }
A map<string,string> is a repeated entry message { string key = 1; string value = 2; }.
The sandbox runs in the host's network namespace (network NODE: no CNI needed) with its own PID
and IPC namespaces (POD).
"""

from __future__ import annotations

import json
import os
import sys

NS_POD, NS_NODE = 0, 2
STATES = {0: "SANDBOX_READY", 1: "SANDBOX_NOTREADY"}
SERVICE = "/runtime.v1.RuntimeService/"

# The protobuf primitives cri_pull.py defines (this file's directory is on sys.path when it runs
# as a program, and its package when imported).
try:
    from cri_pull import field, read_varint, varint  # noqa: E402
except ImportError:  # imported as shoal_fixtures.cri_pod
    from .cri_pull import field, read_varint, varint  # noqa: E402


# -- encoding ------------------------------------------------------------------------------------

def string(num: int, s: str) -> bytes:
    return field(num, s.encode()) if s else b""


def enum(num: int, value: int) -> bytes:
    """A varint field, written even when 0 (a decoder reads an explicit 0 as the default)."""
    return varint(num << 3) + varint(value)


def string_map(num: int, items: dict[str, str]) -> bytes:
    return b"".join(field(num, string(1, k) + string(2, v)) for k, v in sorted(items.items()))


def run_request(name: str, namespace: str, uid: str, labels: dict[str, str]) -> bytes:
    metadata = string(1, name) + string(2, uid) + string(3, namespace) + enum(4, 0)
    ns_options = enum(1, NS_NODE) + enum(2, NS_POD) + enum(3, NS_POD)
    linux = field(2, field(1, ns_options))
    config = field(1, metadata) + string_map(6, labels) + field(8, linux)
    return field(1, config)


# -- decoding ------------------------------------------------------------------------------------

def fields(msg: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) of every field: an int for varints, bytes for length-delimited."""
    out: list[tuple[int, int | bytes]] = []
    i = 0
    while i < len(msg):
        key, i = read_varint(msg, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = read_varint(msg, i)
            out.append((num, v))
        elif wire == 2:
            n, i = read_varint(msg, i)
            out.append((num, msg[i:i + n]))
            i += n
        elif wire == 1:
            out.append((num, int.from_bytes(msg[i:i + 8], "little")))
            i += 8
        elif wire == 5:
            out.append((num, int.from_bytes(msg[i:i + 4], "little")))
            i += 4
        else:
            raise ValueError(f"unexpected wire type {wire}")
    return out


def decode_map(entries: list[bytes]) -> dict[str, str]:
    out = {}
    for e in entries:
        kv = dict(fields(e))
        out[bytes(kv.get(1, b"")).decode()] = bytes(kv.get(2, b"")).decode()
    return out


def decode_sandbox(msg: bytes) -> dict:
    f = fields(msg)
    one = {num: v for num, v in f}  # last one wins, as in protobuf
    meta = dict(fields(one.get(2, b"")))
    return {
        "id": bytes(one.get(1, b"")).decode(),
        "name": bytes(meta.get(1, b"")).decode(),
        "namespace": bytes(meta.get(3, b"")).decode(),
        "uid": bytes(meta.get(2, b"")).decode(),
        "attempt": meta.get(4, 0),
        "state": STATES.get(one.get(3, 0), str(one.get(3, 0))),
        "created_at": one.get(4, 0),
        "labels": decode_map([v for num, v in f if num == 5]),
        "annotations": decode_map([v for num, v in f if num == 6]),
    }


# -- main ----------------------------------------------------------------------------------------

def usage() -> int:
    print("\n".join(__doc__.splitlines()[2:6]), file=sys.stderr)
    return 2


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] not in ("run", "stop", "remove", "list"):
        return usage()
    cmd, sock, args = argv[1], argv[2], argv[3:]
    if cmd == "run":
        if len(args) < 3 or any("=" not in a for a in args[3:]):
            return usage()
        labels = dict(a.split("=", 1) for a in args[3:])
        rpc, request = "RunPodSandbox", run_request(args[0], args[1], args[2], labels)
    elif cmd in ("stop", "remove"):
        if len(args) != 1:
            return usage()
        rpc = "StopPodSandbox" if cmd == "stop" else "RemovePodSandbox"
        request = string(1, args[0])
    else:
        if args:
            return usage()
        rpc, request = "ListPodSandbox", b""
    try:
        import grpc  # noqa: PLC0415 - only the program needs it
    except ImportError:
        print(f"cri_pod.py: {sys.executable} has no grpc module (Debian: python3-grpcio, which "
              "tools/install-deps installs)", file=sys.stderr)
        return 2
    timeout = float(os.environ.get("SHOAL_CRI_TIMEOUT", "120"))
    with grpc.insecure_channel("unix://" + sock) as ch:
        call = ch.unary_unary(SERVICE + rpc)
        try:
            resp = call(request, timeout=timeout)
        except grpc.RpcError as e:
            print(" ".join([rpc, *args]) + f": {e.code().name}: {e.details()}", file=sys.stderr)
            return 1
    if cmd == "run":
        print(bytes(dict(fields(resp)).get(1, b"")).decode())
    elif cmd == "list":
        for num, item in fields(resp):
            if num == 1:
                print(json.dumps(decode_sandbox(item), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
