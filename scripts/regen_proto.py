"""Regenerate ``src/eoclient/_proto`` from ``proto/google/{pubsub/v1,iam/v1,type}/*.proto``.

Usage::

    python scripts/regen_proto.py          # rewrite the generated modules
    python scripts/regen_proto.py --check  # exit 1 if they are stale

protoc's Python output registers its descriptors in protobuf's *default* pool and
imports its siblings as ``google.pubsub.v1.*``. Both would clash with
google-cloud-pubsub, so the output is rewritten to use ``eoclient._proto._pool.POOL``
and ``eoclient._proto`` imports (see ``_pool.py`` for why). The IAM mixin's messages
(``google.iam.v1``, ``google.type.Expr``) are generated into the same flat package and
pool: grpc-google-iam-v1 (installed with google-cloud-pubsub) registers them in the
default pool too.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
PROTO_FILES = (
    "google/pubsub/v1/schema.proto",
    "google/pubsub/v1/pubsub.proto",
    "google/type/expr.proto",
    "google/iam/v1/policy.proto",
    "google/iam/v1/iam_policy.proto",
    # eoclient's own broker-policies extension service (docs/protocol.md#broker-policy-extension)
    # and the Pulsar message id it decodes.
    "eoclient/broker/v1/broker_policies.proto",
    "pulsar/pulsar_message_id.proto",
)
# Where protoc writes each package's modules (all land flat in eoclient._proto).
GENERATED_PACKAGES = (
    "google.pubsub.v1",
    "google.iam.v1",
    "google.type",
    "eoclient.broker.v1",
    "pulsar",
)
OUT_DIR = ROOT / "src" / "eoclient" / "_proto"
PACKAGE = "eoclient._proto"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi")


def _rewrite(text: str, module: str) -> str:
    text = text.replace(
        "from google.protobuf import descriptor_pool as _descriptor_pool\n",
        f"from {PACKAGE}._pool import POOL as _POOL\n",
    )
    text = text.replace("_descriptor_pool.Default().AddSerializedFile(", "_POOL.AddSerializedFile(")
    for package in GENERATED_PACKAGES:
        text = text.replace(f"from {package} import ", f"from {PACKAGE} import ")
        text = text.replace(f"'{package}.{module}'", f"'{PACKAGE}.{module}'")
    return text


def generate() -> dict[str, str]:
    """Run protoc and return {file name: rewritten content} for the generated modules."""
    from grpc_tools import protoc  # imported lazily: a dev-only dependency

    include = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    with tempfile.TemporaryDirectory() as tmp:
        args = [
            "protoc",
            f"-I{PROTO_ROOT}",
            f"-I{include}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            *(str(PROTO_ROOT / name) for name in PROTO_FILES),
        ]
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed: {' '.join(args)}")
        result: dict[str, str] = {}
        for package in GENERATED_PACKAGES:
            generated = Path(tmp).joinpath(*package.split("."))
            for path in sorted(generated.iterdir()):
                if path.name.endswith(GENERATED_SUFFIXES):
                    module = path.name.split(".")[0]
                    result[path.name] = _rewrite(path.read_text(), module)
        return result


def stale_files() -> list[str]:
    """Names of generated files that differ from (or are missing in) the package."""
    stale = []
    for name, content in generate().items():
        target = OUT_DIR / name
        if not target.exists() or target.read_text() != content:
            stale.append(name)
    return stale


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale files")
    options = parser.parse_args()
    if options.check:
        stale = stale_files()
        if stale:
            print(f"stale generated code: {', '.join(stale)}; run python scripts/regen_proto.py")
            return 1
        print("generated code is up to date")
        return 0
    for name, content in generate().items():
        (OUT_DIR / name).write_text(content)
        print(f"wrote {OUT_DIR / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
