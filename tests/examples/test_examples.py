"""``examples/`` and ``docs/xbackend.md``, checked against what weir does today.

1. Every example folder validates: those under ``examples/xbackend`` together
   with the shared ``examples/xbackend/_gateway``, the others on their own.
   ``examples/xbackend/validation`` is invalid on purpose and must fail.
2. ``weir translate`` of each XBackend example exits 0 without problems and
   gives exactly the conditions :data:`EXPECTED` lists for its XBackends and
   routes: the claims ``docs/xbackend.md`` makes about each example.
3. Every output block of ``docs/xbackend.md`` that follows a marker
   ``<!-- output: COMMAND | VIEW -->`` is what weir prints today, byte for
   byte (see :func:`render` for the views).
   ``WEIR_UPDATE_DOCS=1 python -m pytest tests/examples/test_examples.py``
   rewrites those blocks; review the diff like code.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import tempfile
import textwrap
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from weir.cli import app, yaml_text
from weir.xds.build import EGRESS_DENIED_BODY

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
XBACKEND = EXAMPLES / "xbackend"
DOC = REPO / "docs" / "xbackend.md"
SHARED = "examples/xbackend/_gateway"
INVALID_ON_PURPOSE = "validation"
UPDATE = os.environ.get("WEIR_UPDATE_DOCS") == "1"

runner = CliRunner()

# --------------------------------------------------------------------------- what the doc claims

A, R = "Accepted", "ResolvedRefs"
Conditions = dict[str, tuple[str, str]]  # condition type -> (status, reason)
OK: Conditions = {A: ("True", "Accepted"), R: ("True", "ResolvedRefs")}
ROUTE_OK = OK


def refused(accepted: str, resolved: str | None = None) -> Conditions:
    """An XBackend that is not accepted; ``resolved``: its ResolvedRefs reason when that fails too."""
    return {A: ("False", accepted), R: ("False", resolved) if resolved else ("True", "ResolvedRefs")}


def route_refs(reason: str) -> Conditions:
    """A route that is accepted but has a reference that does not resolve."""
    return {A: ("True", "Accepted"), R: ("False", reason)}


#: Per example folder, per object (``Kind namespace/name``): its conditions in every status entry weir
#: writes (each Gateway's, for routes and XBackends). Every XBackend and route weir writes status for
#: must be listed; ``None`` says an object gets no status at all.
EXPECTED: dict[str, dict[str, Conditions | None]] = {
    "plaintext": {
        "XBackend default/status-page": OK,
        "HTTPRoute default/status-page": ROUTE_OK,
    },
    "openai": {
        "XBackend default/openai": OK,
        "HTTPRoute default/openai": ROUTE_OK,
    },
    "private-ca": {
        "XBackend default/inventory": OK,
        "XBackend default/ledger": OK,
        "HTTPRoute default/private-ca": ROUTE_OK,
    },
    "sni-vs-host": {
        "XBackend default/geo-eu": OK,
        "HTTPRoute default/geo": ROUTE_OK,
    },
    "subject-alt-names": {
        "XBackend default/reports": OK,
        "XBackend default/search": OK,
        "XBackend default/payments": OK,
        "HTTPRoute default/subject-alt-names": ROUTE_OK,
    },
    "mtls": {
        "XBackend default/bank": OK,
        "HTTPRoute default/bank": ROUTE_OK,
    },
    "rotation": {
        "XBackend default/vault": OK,
        "HTTPRoute default/vault": ROUTE_OK,
    },
    "protocols": {
        "XBackend default/web-default": OK,
        "XBackend default/web-http": OK,
        "XBackend default/legacy": OK,
        "XBackend default/grpc": OK,
        "XBackend default/sidecar": OK,
        "XBackend default/broken-h2c": refused("Invalid"),
        "XBackend default/db": None,  # only an HTTPRoute refers to it, and that reference fails
        "HTTPRoute default/protocols": route_refs(
            "BackendNotFound"
        ),  # its rule to the refused H2C-over-TLS XBackend
        "HTTPRoute default/db-over-http": route_refs("UnsupportedProtocol"),
    },
    "tcp": {
        "XBackend default/cache": OK,
        "TCPRoute default/cache": ROUTE_OK,
    },
    "mcp": {
        "XBackend default/tools": OK,
        "HTTPRoute default/mcp": ROUTE_OK,
    },
    "references": {
        "XBackend default/catalog": OK,
        "XBackend default/catalog-eu": OK,
        "XBackend shared/weather": OK,
        "XBackend shared/geocoder": None,  # the only reference to it is not permitted
        "HTTPRoute default/catalog": ROUTE_OK,
        "HTTPRoute default/catalog-wrong-port": route_refs("BackendNotFound"),
        "HTTPRoute default/weather": ROUTE_OK,
        "HTTPRoute default/geocoder": route_refs("RefNotPermitted"),
        "HTTPRoute default/split": ROUTE_OK,
        "HTTPRoute default/partly-broken": route_refs("BackendNotFound"),
    },
    "status": {
        "XBackend default/shared-api": OK,
        "XBackend default/ca-missing": refused("NoValidCACertificate", "InvalidCACertificateRef"),
        "XBackend default/ca-no-key": refused("NoValidCACertificate", "InvalidCACertificateRef"),
        "XBackend default/ca-not-pem": refused("NoValidCACertificate", "InvalidCACertificateRef"),
        "XBackend default/ca-wrong-kind": refused("NoValidCACertificate", "InvalidKind"),
        "XBackend default/ca-well-known": refused("UnsupportedValue"),
        "XBackend default/client-missing": refused("Invalid", "InvalidClientCertificateRef"),
        "XBackend default/client-no-key": refused("Invalid", "InvalidClientCertificateRef"),
        "XBackend default/client-wrong-kind": refused("Invalid", "InvalidKind"),
        "XBackend default/client-other-ns": refused("Invalid", "RefNotPermitted"),
        "XBackend default/h2c-with-tls": refused("Invalid"),
        "HTTPRoute default/shared-api": ROUTE_OK,
        "HTTPRoute default/status-reasons": route_refs(
            "BackendNotFound"
        ),  # rules whose only XBackend is refused
    },
    "egress": {
        "XBackend default/wiki": OK,
        "XBackend default/cloud-metadata": refused("UnsupportedValue"),
        "XBackend default/metadata-ip": refused("UnsupportedValue"),
        "XBackend default/local": refused("UnsupportedValue"),
        "XBackend default/single-label": refused("UnsupportedValue"),
        "XBackend default/in-cluster": refused("UnsupportedValue"),
        "XBackend default/partner": refused("NotAllowed"),
        # Its rules to the refused XBackends have no usable backend: the route says so.
        "HTTPRoute default/egress-guard": route_refs("BackendNotFound"),
    },
    "egress-invalid-parameters": {
        "GatewayClass weir-misconfigured": {A: ("False", "InvalidParameters")},
        "XBackend default/docs-api": refused("NotAllowed"),
        "HTTPRoute default/docs-api": ROUTE_OK,
    },
}

#: ``Kind namespace/name`` of the objects whose status entries per Gateway the doc shows.
PARENTS: dict[str, tuple[str, ...]] = {
    "XBackend default/shared-api": ("default/egress", "default/egress-internal"),
}


# --------------------------------------------------------------------------- running weir


def example_folders() -> list[str]:
    return sorted(p.name for p in XBACKEND.iterdir() if p.is_dir() and not p.name.startswith("_"))


def other_folders() -> list[str]:
    return sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir() and p != XBACKEND)


@cache
def invoke(command: str) -> tuple[int, str, str]:
    """``weir COMMAND`` from the repository root: exit code, stdout, and stdout and stderr together."""
    with contextlib.chdir(REPO):
        result = runner.invoke(app, shlex.split(command))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.output


def translate_command(example: str, *flags: str) -> str:
    return " ".join(("translate", "-f", SHARED, "-f", f"examples/xbackend/{example}", *flags))


@cache
def translated(command: str) -> dict[str, Any]:
    code, stdout, output = invoke(command)
    assert code == 0, output
    data: dict[str, Any] = yaml.safe_load(stdout)
    return data


def key_of(resource: dict[str, Any]) -> str:
    meta = resource["metadata"]
    where = f"{meta['namespace']}/{meta['name']}" if "namespace" in meta else meta["name"]
    return f"{resource['kind']} {where}"


def resource(data: dict[str, Any], key: str) -> dict[str, Any]:
    found = [r for r in data["resources"] if key_of(r) == key]
    assert found, f"{key}: no status in the output"
    return found[0]


def condition_lists(status: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """The condition lists of an object's status: one per parent entry, or its own."""
    if "parents" in status:
        return [p["conditions"] for p in status["parents"]]
    return [status["conditions"]]


# --------------------------------------------------------------------------- 1. validate


@pytest.mark.parametrize("example", example_folders())
def test_xbackend_example_validates_with_the_shared_gateway(example: str) -> None:
    code, _, output = invoke(f"validate -f {SHARED} -f examples/xbackend/{example}")
    if example == INVALID_ON_PURPOSE:
        assert code == 1, output
        documents = (XBACKEND / example / "invalid.yaml").read_text().count("\nkind: ")
        assert f"error(s) in {documents} invalid object(s); 3 valid" in output, output
    else:
        assert code == 0, output
        assert "object(s) valid" in output and "warning" not in output, output


@pytest.mark.parametrize("folder", other_folders())
def test_other_example_validates_on_its_own(folder: str) -> None:
    code, _, output = invoke(f"validate -f examples/{folder}")
    assert code == 0, output
    assert "warning" not in output, output


def test_all_xbackend_examples_load_together() -> None:
    """Names and route paths are unique across examples: all of them can be served at once."""
    folders = " ".join(f"-f examples/xbackend/{e}" for e in example_folders() if e != INVALID_ON_PURPOSE)
    code, stdout, output = invoke(f"translate -f {SHARED} {folders}")
    assert code == 0, output
    assert yaml.safe_load(stdout)["problems"] == []


# --------------------------------------------------------------------------- 2. translate


def test_every_example_has_expectations() -> None:
    assert set(EXPECTED) == set(example_folders()) - {INVALID_ON_PURPOSE}


@pytest.mark.parametrize("example", sorted(EXPECTED))
def test_example_status_is_what_the_doc_claims(example: str) -> None:
    data = translated(translate_command(example))
    assert data["problems"] == []
    expected = EXPECTED[example]
    seen = {key_of(r) for r in data["resources"] if r["kind"] in ("XBackend", "HTTPRoute", "TCPRoute")}
    listed = {key for key, conds in expected.items() if conds is not None}
    assert seen - set(expected) == set(), "objects with status the doc does not describe"
    assert seen & {key for key, conds in expected.items() if conds is None} == set(), "unexpected status"
    for key in sorted(listed):
        status = resource(data, key)["status"]
        for conditions in condition_lists(status):
            actual = {c["type"]: (c["status"], c["reason"]) for c in conditions if c["type"] in expected[key]}
            assert actual == expected[key], f"{example}: {key}"


def test_status_has_one_entry_per_gateway() -> None:
    data = translated(translate_command("status"))
    for key, gateways in PARENTS.items():
        parents = resource(data, key)["status"]["parents"]
        assert [f"{p['parentRef']['namespace']}/{p['parentRef']['name']}" for p in parents] == list(gateways)


def test_egress_flags_override_the_class_parameters() -> None:
    data = translated(translate_command("plaintext", "--egress-allowed-hostnames", "api.openai.com"))
    [conditions] = condition_lists(resource(data, "XBackend default/status-page")["status"])
    accepted = next(c for c in conditions if c["type"] == A)
    assert (accepted["status"], accepted["reason"]) == ("False", "NotAllowed")
    assert "--egress-allowed-hostnames" in accepted["message"]


def test_rotation_renames_the_secrets() -> None:
    """Secrets are named by content: each rotation step gives the cluster other secret names."""
    names = rotation_steps()
    assert len({step["trustedCa"] for step in names.values()}) == 3
    assert len({step["clientCertificate"] for step in names.values()}) == 2


# --------------------------------------------------------------------------- 3. the doc's output blocks

MARKER = re.compile(r"<!-- output: (?P<spec>.+?) -->\n```(?P<lang>\w+)\n(?P<body>.*?)```\n", re.DOTALL)
CLUSTER = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
ROUTES = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"


def dump(data: Any) -> str:
    """YAML as ``weir translate`` writes it."""
    return yaml_text(data)


def render(spec: str) -> str:
    """The block a marker's ``COMMAND | VIEW`` stands for.

    ``validate ...``: the command line and everything it prints. ``translate
    ...`` with a view, an excerpt of its YAML with the structure above it
    kept: ``status KEY...`` (whole resources), ``conditions KEY...`` (the
    conditions of each, of its first status entry), ``ir-upstreams FIELD,...
    NAME...``, ``ir-route NAME``, ``ir-listener NAME``, ``ir-dns``,
    ``envoy-cluster NAME FIELD``, ``envoy-route NAME``. ``rotation``: the secret names after each step of
    the rotation walk-through. KEYs are ``Kind/namespace/name`` (no spaces).
    """
    command, _, view = (part.strip() for part in spec.partition("|"))
    if command == "rotation":
        steps = rotation_steps()
        head = (
            "# ir.upstreams[xbackend/default/vault].tls of `weir translate`, "
            "after each edit of examples/xbackend/rotation/pki.yaml\n"
        )
        return head + dump(steps)
    if command.startswith("validate"):
        _, _, output = invoke(command)
        return f"$ weir {command}\n{output}"
    data = translated(command)
    name, *args = view.split()
    head = f"# weir {command}   (excerpt)\n"
    if name == "status":
        return head + dump({"resources": [resource(data, k.replace("/", " ", 1)) for k in args]})
    if name == "conditions":
        text = head.rstrip("\n") + ": the conditions of each object\n"
        for k in args:
            key = k.replace("/", " ", 1)
            text += f"# {key}\n" + dump(condition_lists(resource(data, key)["status"])[0])
        return text
    if name == "ir-upstreams":
        fields = ["name", *args[0].split(",")]
        upstreams = {u["name"]: u for u in data["ir"]["upstreams"]}
        return head + dump({"ir": {"upstreams": [{f: upstreams[n][f] for f in fields} for n in args[1:]]}})
    if name == "ir-route":
        for listener in data["ir"]["listeners"]:
            for vhost in listener["virtualHosts"]:
                for route in vhost["routes"]:
                    if route["name"] == args[0]:
                        excerpt = {"name": vhost["name"], "routes": [route]}
                        listeners = [{"name": listener["name"], "virtualHosts": [excerpt]}]
                        return head + dump({"ir": {"listeners": listeners}})
        raise AssertionError(f"no IR route {args[0]}")
    if name == "ir-listener":
        [listener] = [li for li in data["ir"]["listeners"] if li["name"] == args[0]]
        return head + dump({"ir": {"listeners": [listener]}})
    if name == "ir-dns":
        return head + dump({"ir": {"dns": data["ir"]["dns"]}})
    if name == "envoy-cluster":
        cluster = data["envoy"][CLUSTER][args[0]]
        return head + dump({"envoy": {CLUSTER: {args[0]: {args[1]: cluster[args[1]]}}}})
    if name == "envoy-route":
        for config_name, config in data["envoy"][ROUTES].items():
            for vhost in config["virtualHosts"]:
                for route in vhost["routes"]:
                    if route["name"] == args[0]:
                        excerpt = {"virtualHosts": [{"name": vhost["name"], "routes": [route]}]}
                        return head + dump({"envoy": {ROUTES: {config_name: excerpt}}})
        raise AssertionError(f"no Envoy route {args[0]}")
    raise AssertionError(f"unknown view {view!r}")


@cache
def rotation_steps() -> dict[str, dict[str, str]]:
    """The CA and client certificate secret names of XBackend vault as committed and after each edit."""
    pki = XBACKEND / "_pki"
    original = (XBACKEND / "rotation" / "pki.yaml").read_text()

    def block(name: str) -> str:
        return textwrap.indent((pki / name).read_text().strip() + "\n", "    ")

    ca, new_ca = block("example-ca.crt"), block("example-ca-2.crt")
    assert original.count(ca) == 1, "rotation/pki.yaml does not embed _pki/example-ca.crt"
    steps = {
        "as committed": original,
        "new CA appended to ConfigMap vault-ca": original.replace(ca, ca + new_ca),
        "old CA removed from ConfigMap vault-ca": original.replace(ca, new_ca),
        "new client certificate in Secret vault-client": original.replace(
            block("client.crt"), block("client-2.crt")
        ).replace(block("client.key"), block("client-2.key")),
    }
    out: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory(prefix="weir-rotation-") as tmp_name:
        tmp = Path(tmp_name)
        for step, text in steps.items():
            folder = tmp / str(len(out))
            shutil.copytree(XBACKEND / "rotation", folder)
            (folder / "pki.yaml").write_text(text)
            with contextlib.chdir(REPO):
                result = runner.invoke(app, ["translate", "-f", SHARED, "-f", str(folder)])
            assert result.exit_code == 0, result.output
            [upstream] = yaml.safe_load(result.stdout)["ir"]["upstreams"]
            out[step] = {k: upstream["tls"][k] for k in ("trustedCa", "clientCertificate")}
    return out


def test_doc_output_blocks_are_what_weir_prints() -> None:
    text = DOC.read_text()
    blocks = list(MARKER.finditer(text))
    assert blocks, "no <!-- output: ... --> markers in docs/xbackend.md"
    stale = []
    new_text, last = "", 0
    for match in blocks:
        fresh = render(match["spec"])
        if not fresh.endswith("\n"):
            fresh += "\n"
        if fresh != match["body"]:
            stale.append(match["spec"])
        new_text += text[last : match.start("body")] + fresh
        last = match.end("body")
    new_text += text[last:]
    if UPDATE:
        DOC.write_text(new_text)
        return
    assert stale == [], (
        "docs/xbackend.md shows output weir no longer prints (WEIR_UPDATE_DOCS=1 rewrites it):\n"
        + "\n".join(stale)
    )


LINES_OF = re.compile(r"<!-- lines-of: (?P<command>.+?) -->\n```\w+\n(?P<body>.*?)```\n", re.DOTALL)


def test_doc_excerpts_are_lines_weir_prints() -> None:
    """Blocks marked ``<!-- lines-of: COMMAND -->``: each line but comments is printed by ``weir COMMAND``."""
    matches = list(LINES_OF.finditer(DOC.read_text()))
    assert matches
    for match in matches:
        code, stdout, output = invoke(match["command"])
        assert code == 0, output
        printed = set(stdout.splitlines())
        for line in match["body"].splitlines():
            assert line.startswith("#") or line in printed, f"weir {match['command']} does not print {line!r}"


def test_doc_markers_cover_every_example() -> None:
    text = DOC.read_text()
    for example in example_folders():
        assert f"examples/xbackend/{example}" in text, f"docs/xbackend.md does not show {example}"


def test_doc_quotes_the_egress_guard_body() -> None:
    """The 403 body in the doc (captured from a run) still has the shape Envoy is told to produce."""
    pattern = re.escape(EGRESS_DENIED_BODY.strip())
    for placeholder in ("UPSTREAM_CLUSTER", "RESPONSE_CODE_DETAILS"):
        pattern = pattern.replace(re.escape(f"%{placeholder}%"), r"\S+")
    # The refusal endpoint's address names each address and its network: ``... in 10.0.0.0/8``.
    pattern = pattern.replace(re.escape("%UPSTREAM_HOST%"), r"envoy://weir-egress-denied/[^\]]+")
    assert re.search(pattern, DOC.read_text()), "the 403 body shown in docs/xbackend.md is out of date"
