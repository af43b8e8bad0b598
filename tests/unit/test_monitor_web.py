"""The exporters' web config (Prometheus exporter-toolkit format: TLS, basic auth), where
they listen, and a real server on 127.0.0.1 with TLS and basic auth."""

from __future__ import annotations

import base64
import shutil
import socket
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bcrypt
import pytest
from click.testing import CliRunner
from prometheus_client import CollectorRegistry, Gauge

from slurm_hetero.errors import InputError
from slurm_hetero.monitor.cli import cluster_exporter, node_exporter
from slurm_hetero.monitor.web import (
    BasicAuth,
    WebConfigError,
    listen_address,
    load_web_config,
    parse_web_config,
    start_server,
)

# Cost 4: fast tests. A fixed salt: the hash names parametrized tests, which must be the same
# in every process that collects them (pytest-xdist's workers).
HASH = bcrypt.hashpw(b"s3cret", b"$2b$04$abcdefghijklmnopqrstuO").decode()


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A self-signed certificate for 127.0.0.1 (openssl)."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command")
    d = tmp_path_factory.mktemp("certs")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(d / "server.key"), "-out", str(d / "server.crt"), "-days", "2",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True)
    return d


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


# ---- the parser: every problem names the file and the field ---------------------------------------

@pytest.mark.parametrize(("text", "field"), [
    ("tls_server_config: [cert_file\n", "line 2: not valid YAML"),
    ("- a\n- b\n", "a mapping of tls_server_config, basic_auth_users is needed"),
    ("basic_auth_user: {p: x}\n", "basic_auth_user: unknown or unsupported key (supported: tls_server_config, "
                                  "basic_auth_users)"),
    ("http_server_config: {http2: false}\n", "http_server_config: unknown or unsupported key"),
    ("tls_server_config: {cert_file: a.crt, key_file: a.key, cipher_suites: [x]}\n",
     "tls_server_config.cipher_suites: unknown or unsupported key (supported: cert_file, key_file,"),
    ("tls_server_config: {key_file: a.key}\n", "tls_server_config.cert_file: missing (TLS needs cert_file and "
                                               "key_file)"),
    ("tls_server_config: {cert_file: a.crt}\n", "tls_server_config.key_file: missing"),
    ("tls_server_config: {cert_file: nope.crt, key_file: nope.key}\n", "tls_server_config.cert_file: "),
    ("tls_server_config: yes\n", "tls_server_config: a mapping of cert_file, key_file"),
    (f"basic_auth_users: {{prometheus: {HASH[:-1]}}}\n", "basic_auth_users.prometheus: not a bcrypt hash"),
    ("basic_auth_users: {prometheus: plain-password}\n", "basic_auth_users.prometheus: not a bcrypt hash"),
    (f"basic_auth_users: {{'a:b': '{HASH}'}}\n", "basic_auth_users: user 'a:b': a printable name without ':'"),
    (f"basic_auth_users: {{1: '{HASH}'}}\n", "basic_auth_users: user 1:"),
    ("basic_auth_users: [prometheus]\n", "basic_auth_users: a mapping of user name to bcrypt hash"),
])
def test_bad_web_configs_name_the_file_and_field(tmp_path: Path, text: str, field: str) -> None:
    path = write(tmp_path / "web.yml", text)
    with pytest.raises(WebConfigError) as e:
        load_web_config(path)
    assert str(e.value).startswith(f"{path}: ") and field in str(e.value), str(e.value)
    assert e.value.exit_code == 2


@pytest.mark.parametrize(("tls", "field"), [
    ("min_version: TLS14", "tls_server_config.min_version: 'TLS14': one of TLS10, TLS11, TLS12, TLS13"),
    ("min_version: TLS13, max_version: TLS12", "tls_server_config.max_version: TLS12 is below min_version"),
    ("max_version: TLS11", "tls_server_config.max_version: TLS11 is below min_version"),  # default TLS12
    ("min_version: [TLS12]", "tls_server_config.min_version: ['TLS12']: one of"),
    ("client_auth_type: RequireAnyClientCert", "tls_server_config.client_auth_type: 'RequireAnyClientCert': "
                                               "one of NoClientCert, VerifyClientCertIfGiven"),
    ("client_auth_type: RequireAndVerifyClientCert", "tls_server_config.client_ca_file: missing"),
    ("client_ca_file: server.crt", "tls_server_config.client_auth_type: NoClientCert with a client_ca_file"),
    ("client_ca_file: none.crt, client_auth_type: VerifyClientCertIfGiven",
     "tls_server_config.client_ca_file: cannot be loaded"),
])
def test_bad_tls_settings(certs: Path, tls: str, field: str) -> None:
    text = f"tls_server_config: {{cert_file: server.crt, key_file: server.key, {tls}}}\n"
    with pytest.raises(WebConfigError, match="tls_server_config") as e:
        parse_web_config(text, str(certs / "web.yml"))
    assert field in str(e.value)


def test_a_key_that_is_not_the_certificates(certs: Path, tmp_path: Path) -> None:
    (tmp_path / "other.key").write_text((certs / "server.crt").read_text())  # a certificate, not a key
    path = write(tmp_path / "web.yml", f"tls_server_config: {{cert_file: {certs}/server.crt, key_file: other.key}}\n")
    with pytest.raises(WebConfigError, match=r"tls_server_config.cert_file/key_file: .* cannot be loaded"):
        load_web_config(path)


def test_an_encrypted_key_is_refused_without_asking(certs: Path, tmp_path: Path) -> None:
    subprocess.run(["openssl", "pkey", "-in", str(certs / "server.key"), "-aes256", "-passout", "pass:x",
                    "-out", str(tmp_path / "enc.key")], check=True, capture_output=True)
    path = write(tmp_path / "web.yml", f"tls_server_config: {{cert_file: {certs}/server.crt, key_file: enc.key}}\n")
    with pytest.raises(WebConfigError, match=r"tls_server_config.key_file: .*enc.key is encrypted"):
        load_web_config(path)


def test_good_web_configs(certs: Path, tmp_path: Path) -> None:
    assert load_web_config(write(tmp_path / "empty.yml", "")).scheme == "http"  # as exporter-toolkit
    web = load_web_config(write(certs / "web.yml", "tls_server_config:\n  cert_file: server.crt\n"
                                                   "  key_file: server.key\n  client_ca_file: server.crt\n"
                                                   "  client_auth_type: VerifyClientCertIfGiven\n"
                                                   f"basic_auth_users:\n  prometheus: '{HASH}'\n"))
    assert web.cert_file == str(certs / "server.crt")  # relative to the web config's folder
    assert web.scheme == "https" and web.users == {"prometheus": HASH.encode()}
    assert web.context is not None and web.context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert web.context.verify_mode == ssl.CERT_OPTIONAL
    with pytest.raises(WebConfigError, match="cannot read the web config"):
        load_web_config(str(tmp_path / "missing.yml"))


def test_exporters_refuse_a_bad_web_config_before_starting(tmp_path: Path) -> None:
    path = write(tmp_path / "web.yml", "tls_server_config: {cert_file: x.crt}\n")
    for command, args in ((node_exporter, []), (cluster_exporter, ["--site", str(tmp_path / "no-site.yaml")])):
        r = CliRunner().invoke(command, [*args, "--port", "0", "--web-config-file", path])
        assert r.exit_code == 2, r.output
        assert f"{path}: tls_server_config.key_file: missing" in r.output
    r = CliRunner().invoke(node_exporter, ["--listen", "10.0.0.1/8", "--port", "0"])
    assert r.exit_code == 2 and "--listen 10.0.0.1/8: '10.0.0.1/8' is neither" in r.output, r.output


# ---- where to listen ---------------------------------------------------------------------------

def test_listen_address() -> None:
    assert listen_address("0.0.0.0") == "0.0.0.0" and listen_address("::") == "::"
    assert listen_address("10.9.8.7") == "10.9.8.7"  # one host's own command line may name its address
    assert listen_address("127.0.0.0/8") == "127.0.0.1"  # this host's own address in the network
    # 127.0.0.2 is reached from 127.0.0.1 here: an address outside the network named
    with pytest.raises(InputError, match=r"--listen 127\.0\.0\.2/32: this host has no address in "
                                         r"127\.0\.0\.2/32 \(it would reach it from 127\.0\.0\.1\)"):
        listen_address("127.0.0.2/32")
    with pytest.raises(InputError, match="--listen eth0: 'eth0' is neither an IP address nor a network"):
        listen_address("eth0")


# ---- basic auth --------------------------------------------------------------------------------

def test_basic_auth_runs_bcrypt_once_per_credential(monkeypatch: pytest.MonkeyPatch) -> None:
    auth = BasicAuth({"prometheus": HASH.encode()})
    calls: list[bytes] = []
    real = bcrypt.checkpw

    def counted(password: bytes, hashed: bytes) -> bool:
        calls.append(password)
        return real(password, hashed)

    monkeypatch.setattr(bcrypt, "checkpw", counted)
    assert auth.check("prometheus", "s3cret") and auth.check("prometheus", "s3cret")
    assert calls == [b"s3cret"]  # the second scrape was remembered
    assert not auth.check("prometheus", "wrong") and not auth.check("prometheus", "wrong")
    assert not auth.check("nobody", "s3cret")  # an unknown user still costs a bcrypt check
    assert len(calls) == 4
    assert not auth.check("prometheus", "x" * 100)  # bcrypt takes 72 bytes at most


# ---- a real server ------------------------------------------------------------------------------

@pytest.fixture
def server(certs: Path) -> Iterator[int]:
    """/metrics on 127.0.0.1 (a free port) with TLS and basic auth."""
    reg = CollectorRegistry()
    Gauge("hetero_test_value", "a test gauge", registry=reg).set(42)
    web = load_web_config(write(certs / "web.yml", "tls_server_config: {cert_file: server.crt, key_file: "
                                                   f"server.key}}\nbasic_auth_users: {{prometheus: '{HASH}'}}\n"))
    httpd, thread = start_server(reg, 0, "127.0.0.1", web)
    try:
        yield int(httpd.server_address[1])
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def get(url: str, certs: Path, user: str | None = None, password: str = "") -> tuple[int, str]:
    req = urllib.request.Request(url)
    if user is not None:
        req.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
    ctx = ssl.create_default_context(cafile=str(certs / "server.crt"))
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        assert e.headers["WWW-Authenticate"] == 'Basic realm="slurm-hetero"'
        return e.code, ""


def test_tls_and_basic_auth_over_http(server: int, certs: Path) -> None:
    url = f"https://127.0.0.1:{server}/metrics"
    assert get(url, certs) == (401, "")
    assert get(url, certs, "prometheus", "wrong") == (401, "")
    assert get(url, certs, "someone", "s3cret") == (401, "")
    status, body = get(url, certs, "prometheus", "s3cret")
    assert status == 200 and "hetero_test_value 42.0" in body
    # TLS is what is served: the certificate is ours, and plain HTTP gets no answer.
    with socket.create_connection(("127.0.0.1", server), timeout=5) as raw:
        ctx = ssl.create_default_context(cafile=str(certs / "server.crt"))
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            assert tls.version() in ("TLSv1.2", "TLSv1.3")
            cert: Any = tls.getpeercert()  # typeshed: a dict of unions, or None
            assert dict(x[0] for x in cert["subject"])["commonName"] == "localhost"
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(f"http://127.0.0.1:{server}/metrics", timeout=5)


def test_a_client_stalled_in_the_handshake_blocks_no_one(server: int, certs: Path) -> None:
    with socket.create_connection(("127.0.0.1", server), timeout=5):  # connects, sends nothing
        assert get(f"https://127.0.0.1:{server}/metrics", certs, "prometheus", "s3cret")[0] == 200
