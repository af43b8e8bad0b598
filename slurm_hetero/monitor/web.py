"""Serving /metrics: the address to listen on, and TLS and basic auth from a web config file
in the Prometheus exporter-toolkit format (`--web-config-file`, as Prometheus's own
exporters take it), so one file serves a site's exporters alike:

    tls_server_config:
      cert_file: server.crt          # relative paths: from the web config's folder
      key_file: server.key
      client_ca_file: ca.crt         # with client_auth_type VerifyClientCertIfGiven or
      client_auth_type: RequireAndVerifyClientCert   # RequireAndVerifyClientCert
      min_version: TLS12             # TLS10..TLS13; max_version too
    basic_auth_users:
      prometheus: $2b$12$...         # bcrypt hashes (htpasswd -nBC 12 USER)

Every problem is a WebConfigError (exit 2) naming the file and the field; certificates and
keys are loaded at start, so a bad one never waits for the first scrape.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import ipaddress
import logging
import os
import re
import socket
import ssl
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from socketserver import ThreadingMixIn
from typing import Any, TypeVar
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

from slurm_hetero.errors import InputError, RuntimeFailure
from slurm_hetero.site.monitor import parse_listen

log = logging.getLogger("slurm-hetero.exporter")
T = TypeVar("T")

TOP_KEYS = ("tls_server_config", "basic_auth_users")
TLS_KEYS = ("cert_file", "key_file", "client_ca_file", "client_auth_type", "min_version", "max_version")
TLS_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
                "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
# exporter-toolkit's names; Python's ssl verifies every client certificate it asks for, so
# its RequestClientCert and RequireAnyClientCert (ask, do not verify) have no equivalent.
CLIENT_AUTH = {"NoClientCert": ssl.CERT_NONE, "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
               "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}
BCRYPT_HASH = re.compile(r"\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}")
HANDSHAKE_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_S = 30.0  # a client that stalls holds only its own thread, and not for long


class WebConfigError(InputError):
    pass


@dataclass(frozen=True)
class WebConfig:
    """A parsed web config; empty (no TLS, no users) serves plain HTTP to anyone, as the
    exporter-toolkit does with an empty file."""

    path: str = ""
    cert_file: str | None = None
    key_file: str | None = None
    users: Mapping[str, bytes] = field(default_factory=dict)  # user → bcrypt hash
    context: ssl.SSLContext | None = field(default=None, compare=False, repr=False)

    @property
    def scheme(self) -> str:
        return "https" if self.context else "http"


def _fail(path: str, where: str, problem: str) -> WebConfigError:
    return WebConfigError(f"{path}: {where}: {problem}" if where else f"{path}: {problem}")


def _check_keys(path: str, where: str, data: Mapping[Any, Any], allowed: Iterable[str]) -> None:
    allowed = tuple(allowed)
    for key in data:
        if key not in allowed:
            name = f"{where}.{key}" if where else str(key)
            raise _fail(path, name, f"unknown or unsupported key (supported: {', '.join(allowed)})")


def _string(path: str, where: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise _fail(path, where, f"{value!r}: a non-empty string is needed")
    return value


def _choice(path: str, where: str, value: Any, allowed: Mapping[str, T]) -> T:
    if not isinstance(value, str) or value not in allowed:
        raise _fail(path, where, f"{value!r}: one of {', '.join(allowed)}")
    return allowed[value]


def _tls_context(path: str, tls: Any) -> tuple[ssl.SSLContext, str, str]:
    where = "tls_server_config"
    if not isinstance(tls, dict):
        raise _fail(path, where, "a mapping of " + ", ".join(TLS_KEYS) + " is needed")
    _check_keys(path, where, tls, TLS_KEYS)
    for key in ("cert_file", "key_file"):
        if key not in tls:
            raise _fail(path, f"{where}.{key}", "missing (TLS needs cert_file and key_file)")
    base = os.path.dirname(os.path.abspath(path))

    def file(key: str) -> str:
        return os.path.join(base, _string(path, f"{where}.{key}", tls[key]))

    cert, key = file("cert_file"), file("key_file")
    for name, p in (("cert_file", cert), ("key_file", key)):
        if not os.path.isfile(p):
            raise _fail(path, f"{where}.{name}", f"{p}: no such file")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)

    def no_password() -> bytes:  # a service has no one to type it: OpenSSL would ask the tty
        raise _fail(path, f"{where}.key_file", f"{key} is encrypted; an exporter needs it unencrypted")

    try:
        ctx.load_cert_chain(cert, key, password=no_password)
    except (ssl.SSLError, OSError) as e:
        raise _fail(path, f"{where}.cert_file/key_file", f"{cert}, {key}: cannot be loaded: {e}") from e
    versions = {}
    for name in ("min_version", "max_version"):
        value = tls.get(name, "TLS12" if name == "min_version" else None)  # exporter-toolkit's minimum
        if value is not None:
            versions[name] = _choice(path, f"{where}.{name}", value, TLS_VERSIONS)
    if versions.get("max_version", versions["min_version"]) < versions["min_version"]:
        raise _fail(path, f"{where}.max_version", f"{tls['max_version']} is below min_version")
    ctx.minimum_version = versions["min_version"]
    if "max_version" in versions:
        ctx.maximum_version = versions["max_version"]
    auth = tls.get("client_auth_type", "NoClientCert")
    _choice(path, f"{where}.client_auth_type", auth, CLIENT_AUTH)
    if CLIENT_AUTH[auth] != ssl.CERT_NONE or "client_ca_file" in tls:
        if "client_ca_file" not in tls:
            raise _fail(path, f"{where}.client_ca_file", f"missing (client_auth_type {auth} verifies "
                        "client certificates against it)")
        if CLIENT_AUTH[auth] == ssl.CERT_NONE:
            raise _fail(path, f"{where}.client_auth_type", "NoClientCert with a client_ca_file: use "
                        "VerifyClientCertIfGiven or RequireAndVerifyClientCert")
        try:
            ctx.load_verify_locations(file("client_ca_file"))
        except (ssl.SSLError, OSError) as e:
            raise _fail(path, f"{where}.client_ca_file", f"cannot be loaded: {e}") from e
        ctx.verify_mode = CLIENT_AUTH[auth]
    return ctx, cert, key


def _users(path: str, users: Any) -> dict[str, bytes]:
    where = "basic_auth_users"
    if not isinstance(users, dict):
        raise _fail(path, where, "a mapping of user name to bcrypt hash is needed")
    out = {}
    for user, hashed in users.items():
        if not isinstance(user, str) or not user or ":" in user or not user.isprintable():
            raise _fail(path, where, f"user {user!r}: a printable name without ':' is needed")
        if not isinstance(hashed, str) or not BCRYPT_HASH.fullmatch(hashed):
            raise _fail(path, f"{where}.{user}", "not a bcrypt hash ($2b$COST$ and 53 characters; "
                        "`htpasswd -nBC 12 USER` makes one)")
        out[user] = hashed.encode()
    return out


def parse_web_config(text: str, path: str) -> WebConfig:
    """A web config's text (files it names are read relative to `path`'s folder)."""
    import yaml  # only exporters given a web config pay for it

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else ""
        raise _fail(path, where, f"not valid YAML: {getattr(e, 'problem', None) or e}") from None
    if data is None:
        return WebConfig(path)
    if not isinstance(data, dict):
        raise _fail(path, "", "a mapping of " + ", ".join(TOP_KEYS) + " is needed")
    _check_keys(path, "", data, TOP_KEYS)
    context = cert = key = None
    if data.get("tls_server_config") is not None:
        context, cert, key = _tls_context(path, data["tls_server_config"])
    users = _users(path, data["basic_auth_users"]) if data.get("basic_auth_users") is not None else {}
    return WebConfig(path, cert, key, users, context)


MAX_WEB_CONFIG_CHARS = 1 << 20


def load_web_config(path: str) -> WebConfig:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(MAX_WEB_CONFIG_CHARS + 1)  # never more: a huge file stays cheap
    except OSError as e:
        raise WebConfigError(f"{path}: cannot read the web config: {e.strerror}") from e
    except UnicodeDecodeError as e:
        raise WebConfigError(f"{path}: not UTF-8 text: {e.reason}") from e
    if len(text) > MAX_WEB_CONFIG_CHARS:
        raise WebConfigError(f"{path}: more than {MAX_WEB_CONFIG_CHARS} characters is not a web config")
    return parse_web_config(text, path)


# ---- where to listen ----------------------------------------------------------------------------

def listen_address(spec: str, option: str = "--listen") -> str:
    """The address to bind: `spec` itself, or this host's own address in the network `spec`
    names (the one the kernel would send from into it)."""
    try:
        where = parse_listen(spec)
    except ValueError as e:
        raise InputError(f"{option} {spec}: {e}") from e
    if isinstance(where, ipaddress.IPv4Address | ipaddress.IPv6Address):
        return str(where)
    probe = where.network_address + 1 if where.num_addresses > 2 else where.network_address
    family = socket.AF_INET6 if where.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect((str(probe), 9))  # UDP: picks a route and a source address, sends nothing
            own = ipaddress.ip_address(s.getsockname()[0].split("%")[0])
    except OSError as e:
        raise InputError(f"{option} {spec}: this host has no route into {where}: {e.strerror or e}") from e
    if own not in where:
        raise InputError(f"{option} {spec}: this host has no address in {where} (it would reach it "
                         f"from {own})")
    return str(own)


# ---- basic auth and the server ------------------------------------------------------------------

class BasicAuth:
    """Checks `Authorization: Basic` against bcrypt hashes. bcrypt costs tens of milliseconds
    by design, so a credential that passed once is remembered (by a digest of it, the hash
    included) and Prometheus's scrapes every few seconds pay for it once; failures are never
    remembered. An unknown user costs a bcrypt check too, so timing tells no user names."""

    def __init__(self, users: Mapping[str, bytes]):
        try:
            import bcrypt
        except ImportError as e:
            raise RuntimeFailure("basic_auth_users needs the bcrypt package (pip install bcrypt)") from e
        self._bcrypt = bcrypt
        self._users = dict(users)
        self._passed: set[bytes] = set()
        self._lock = threading.Lock()
        self._dummy: bytes | None = None

    def check(self, user: str, password: str) -> bool:
        hashed = self._users.get(user)
        secret = password.encode()
        key = hashlib.sha256(repr((user, password, hashed)).encode()).digest()
        with self._lock:
            if hashed is not None and key in self._passed:
                return True
        if hashed is None and self._dummy is None:  # at the users' cost, as their checks take
            cost = int(next(iter(self._users.values()))[4:6])
            salt = self._bcrypt.gensalt(rounds=cost)
            self._dummy = self._bcrypt.hashpw(os.urandom(16).hex().encode(), salt)
        try:
            ok = self._bcrypt.checkpw(secret, hashed or self._dummy or b"") and hashed is not None
        except ValueError:  # bcrypt refuses passwords over 72 bytes
            return False
        if ok:
            with self._lock:
                self._passed.add(key)
        return ok


def _credentials(header: str) -> tuple[str, str] | None:
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, sep, password = base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return (user, password) if sep else None


WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def with_basic_auth(app: WsgiApp, auth: BasicAuth) -> WsgiApp:
    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        given = _credentials(environ.get("HTTP_AUTHORIZATION", ""))
        if given is None or not auth.check(*given):
            start_response("401 Unauthorized", [("Content-Type", "text/plain; charset=utf-8"),
                                                ("WWW-Authenticate", 'Basic realm="slurm-hetero"')])
            return [b"Unauthorized\n"]
        return app(environ, start_response)

    return guarded


class _Handler(WSGIRequestHandler):
    timeout = REQUEST_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a scrape every few seconds: no access log


class _Server(ThreadingMixIn, WSGIServer):
    """A thread per connection; with TLS the handshake runs in that thread too, so a client
    that never finishes one stalls only itself (wrapping the listening socket would do the
    handshake in accept(), where one such client stops every scrape)."""

    daemon_threads = True
    tls: ssl.SSLContext | None = None

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self.tls is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(HANDSHAKE_TIMEOUT_S)
        try:
            conn = self.tls.wrap_socket(request, server_side=True)
        except (OSError, ssl.SSLError) as e:
            log.debug("TLS handshake with %s failed: %s", client_address, e)
            return
        try:
            super().finish_request(conn, client_address)
        finally:
            conn.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("request from %s failed", client_address, exc_info=True)


def start_server(registry: CollectorRegistry, port: int, addr: str,
                 web: WebConfig | None = None) -> tuple[WSGIServer, threading.Thread]:
    """/metrics of `registry` on addr:port (an address, as listen_address gives) in a daemon
    thread, with the web config's TLS and basic auth."""
    config = web or WebConfig()
    app: WsgiApp = make_wsgi_app(registry)
    if config.users:
        app = with_basic_auth(app, BasicAuth(config.users))
        if config.context is None:
            log.warning("%s: basic auth without tls_server_config sends passwords in clear text", config.path)

    class Server(_Server):
        address_family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        tls = config.context

    httpd = make_server(addr, port, app, Server, handler_class=_Handler)
    thread = threading.Thread(target=httpd.serve_forever, name="metrics", daemon=True)
    thread.start()
    return httpd, thread
