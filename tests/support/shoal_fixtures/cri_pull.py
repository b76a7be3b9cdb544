"""Pulls an image through containerd's CRI plugin, as kubelet does: ImageService/PullImage.

Usage: /usr/bin/python3 cri_pull.py SOCKET REF [TIMEOUT_S]
Prints the image reference containerd answers (its image id) on success; on failure, the gRPC
status and containerd's message on stderr, and exits 1.

Runs under Debian's python3 with python3-grpcio (tools/install-deps), not necessarily the
interpreter of the tests, so the fixture calls it as a program. The two CRI messages it needs
are encoded by hand (runtime.v1, k8s.io/cri-api api.proto):
  PullImageRequest  { ImageSpec image = 1; AuthConfig auth = 2; PodSandboxConfig sandbox_config = 3; }
  ImageSpec         { string image = 1; ... }
  PullImageResponse { string image_ref = 1; }
"""

from __future__ import annotations

import sys


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(num: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return varint((num << 3) | 2) + varint(len(payload)) + payload


def read_varint(msg: bytes, i: int) -> tuple[int, int]:
    """The varint at msg[i:] and the index after it."""
    value, shift = 0, 0
    while True:
        b = msg[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, i


def parse_string_field(msg: bytes, num: int) -> str:
    """The first length-delimited field `num` of `msg`, decoded as UTF-8 ('' when absent)."""
    i = 0
    while i < len(msg):
        key, i = read_varint(msg, i)
        wire = key & 7
        if wire == 0:
            _, i = read_varint(msg, i)
            continue
        if wire != 2:
            raise ValueError(f"unexpected wire type {wire} in PullImageResponse")
        n, i = read_varint(msg, i)
        if key >> 3 == num:
            return msg[i:i + n].decode()
        i += n
    return ""


def pull_request(ref: str) -> bytes:
    return field(1, field(1, ref.encode()))


def main() -> int:
    if len(sys.argv) not in (3, 4):
        print(__doc__.splitlines()[2], file=sys.stderr)
        return 2
    try:
        import grpc  # noqa: PLC0415 - only the program needs it
    except ImportError:
        print(f"cri_pull.py: {sys.executable} has no grpc module (Debian: python3-grpcio, which "
              "tools/install-deps installs)", file=sys.stderr)
        return 2

    sock, ref = sys.argv[1], sys.argv[2]
    timeout = float(sys.argv[3]) if len(sys.argv) == 4 else 600.0
    with grpc.insecure_channel("unix://" + sock) as ch:
        call = ch.unary_unary("/runtime.v1.ImageService/PullImage")
        try:
            resp = call(pull_request(ref), timeout=timeout)
        except grpc.RpcError as e:
            print(f"PullImage {ref}: {e.code().name}: {e.details()}", file=sys.stderr)
            return 1
    print(parse_string_field(resp, 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
