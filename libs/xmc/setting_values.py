"""How each kind of setting value is parsed (flags, numbers, ports, lists, e-mail sets,
static tokens, the public key file), each naming its variable in the error: the parsing
half of ``xmc.settings``, which reads the environment and builds the groups."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from xmc.errors import InvalidArgumentError

PUBLIC_KEY_VARIABLE: Final = "XMC_AUTH_PUBLIC_KEY_FILE"

Env = Mapping[str, str]
ReadFile = Callable[[str], str]

_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off", ""})


def flag(env: Env, name: str, default: bool = False) -> bool:
    raw = env.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise InvalidArgumentError(f"{name}: expected true or false, got {raw!r}")


def number(env: Env, name: str, default: float, *, what: str = "a number") -> float:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        return float(raw)
    except ValueError:
        raise InvalidArgumentError(f"{name}: expected {what}, got {raw!r}") from None


def seconds(env: Env, name: str, default: float) -> float:
    return number(env, name, default, what="seconds")


def port(env: Env, name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    if not raw.strip().isdigit() or not 0 < int(raw) < 65536:
        raise InvalidArgumentError(f"{name}: expected a port number, got {raw!r}")
    return int(raw)


def items(raw: str) -> list[str]:
    return [item.strip() for item in raw.split(",") if item.strip()]


def emails(env: Env, name: str) -> frozenset[str]:
    emails = items(env.get(name, ""))
    bad = [email for email in emails if "@" not in email]
    if bad:
        raise InvalidArgumentError(f"{name}: not an email: {bad[0]!r}")
    return frozenset(email.lower() for email in emails)


def static_tokens(env: Env, name: str) -> dict[str, str]:
    """Parse ``token=email,…``; messages name the entry by position, never by its token."""
    tokens: dict[str, str] = {}
    for position, item in enumerate(items(env.get(name, "")), start=1):
        token, sep, email = (part.strip() for part in item.partition("="))
        if not sep or not token or "@" not in email:
            raise InvalidArgumentError(f"{name}: entry {position} must be token=email")
        if token in tokens:
            raise InvalidArgumentError(f"{name}: entry {position} repeats an earlier token")
        tokens[token] = email.lower()
    return tokens


def read_authorization(env: Env, name: str) -> bool:
    """``off`` (or unset) → False, ``restricted`` → True (decision 0048)."""
    value = env.get(name, "").strip().lower()
    if value in ("", "off"):
        return False
    if value == "restricted":
        return True
    raise InvalidArgumentError(f"{name}: expected off or restricted, got {env.get(name)!r}")


def memberships(env: Env, name: str) -> dict[str, frozenset[str]]:
    """Parse ``email=group,…`` (an email may repeat) into email → its groups."""
    found: dict[str, set[str]] = {}
    for position, item in enumerate(items(env.get(name, "")), start=1):
        email, sep, group = (part.strip() for part in item.partition("="))
        if not sep or "@" not in email or not group:
            raise InvalidArgumentError(f"{name}: entry {position} must be email=group")
        found.setdefault(email.lower(), set()).add(group)
    return {email: frozenset(groups) for email, groups in found.items()}


def read_text(path: str) -> str:
    return Path(path).read_text()


def read_key_file(path: str, read_file: ReadFile) -> str:
    try:
        return read_file(path)
    except OSError as exc:
        raise InvalidArgumentError(
            f"{PUBLIC_KEY_VARIABLE}: cannot read {path!r}: {exc.strerror or exc}"
        ) from None


def load_public_key(pem: str) -> tuple[str, Any]:
    """The accepted algorithm and the parsed key; the key's type decides the algorithm."""
    # Imported here, not at the top: every process loads these settings, and pyjwt's
    # crypto backend (``cryptography``) is ~8 MB of RSS in the Reconciler and the
    # dashboard, which never verify a token.
    import jwt
    from jwt.algorithms import get_default_algorithms, has_crypto

    name = PUBLIC_KEY_VARIABLE
    if not has_crypto:
        raise InvalidArgumentError(
            f"{name}: RS256/ES256 verification needs the cryptography package "
            "(install pyjwt[crypto])"
        )
    if "PRIVATE KEY" in pem:
        raise InvalidArgumentError(f"{name}: holds a private key; give the public key")
    algorithms = get_default_algorithms()
    for algorithm in ("RS256", "ES256"):
        try:
            return algorithm, algorithms[algorithm].prepare_key(pem)
        except (jwt.InvalidKeyError, ValueError, TypeError):
            continue
    raise InvalidArgumentError(f"{name}: not an RSA or P-256 EC public key in PEM form")
