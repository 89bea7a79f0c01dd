"""Secrets never leave: ONE redaction mechanism for bundles, captured environments and crash reports.

A :class:`Redactor` first *learns* the secrets present in everything about to leave (objects,
free text, argv lists, names), then *redacts* every string with the same rules, and finally
*verifies* the output bytes (:meth:`Redactor.leaks`): a bundle with a surviving secret is not
written. docs/bundle.md#secrets describes the rules; in short:

* **secret keys**: a key whose words (split at ``_ - .`` and camelCase) include ``token``,
  ``secret``, ``password``/``passwd``/``pwd``/``pass``/``passphrase``, ``auth``/``authorization``,
  ``credential(s)``/``creds``, ``cookie``, ``sessionid``, ``apikey``, ``dsn``, ``webhook``, or
  end in ``key`` (``WANDB_API_KEY``, ``AccountKey``; not ``sort_key``, ``public_key``): the
  whole value goes, lists and mappings included. ``site_filter``, ``max_tokens``,
  ``tokenizer``, ``author``, ``bypass`` are not secret keys (whole words only).
* **secret flags** in argv lists and command strings: ``--token X``, ``--api-key=X``,
  ``--password X``, ``--secret X``, ``--auth X``, ``-p X`` (any flag whose words are secret);
* **in free text**: ``NAME=value`` / ``NAME: value`` with a secret NAME (``auth=X`` in a raw
  cuBLASLt line, ``HF_TOKEN=...``), HTTP headers (``Authorization: Bearer X``, ``Cookie: ...``,
  ``X-Api-Key: ...``), URL credentials (``https://user:pw@host``), PEM private-key blocks,
  token-shaped values (``hf_...``, ``ghp_...``, ``github_pat_...``, ``sk-...``, ``AKIA...``,
  ``xox?-...``, ``glpat-...``, ``AIza...``, JWTs);
* **learned literals**: every value found by the rules above is then removed wherever else it
  appears (a capture directory named after a token, a member name, a raw log line):
  substrings when 8 characters or longer, whole words when 4 to 7.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

REDACTED = "<redacted>"

_SECRET_WORDS = {"token", "secret", "secrets", "password", "passwd", "pwd", "pass", "passphrase", "auth",
                 "authorization", "credential", "credentials", "creds", "cookie", "cookies", "sessionid",
                 "apikey", "accesskey", "secretkey", "privatekey", "dsn", "webhook", "bearer"}
#: A trailing ``key`` word is secret unless the word before it is one of these.
_PLAIN_KEY_PREFIX = {"sort", "cache", "primary", "foreign", "dict", "hash", "group", "lookup", "partition", "public",
                     "index", "map", "row", "column", "unique", "site", "shard", "sequence", "seq", "dedup",
                     "join", "merge", "api_version", "kernel", "match", "cluster", "layout", "event", "dataset"}
_SCHEMES = {"bearer", "basic", "token", "digest", "negotiate"}
_NOT_SECRET_VALUES = {"", "true", "false", "none", "null", "yes", "no", "0", "1", REDACTED.lower()} | _SCHEMES
_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")

# Token-shaped values (no context needed).
_TOKEN_SHAPES = [
    r"hf_[A-Za-z0-9]{20,}", r"ghp_[A-Za-z0-9]{20,}", r"gh[osru]_[A-Za-z0-9]{20,}", r"github_pat_[A-Za-z0-9_]{20,}",
    r"sk-[A-Za-z0-9_-]{20,}", r"AKIA[0-9A-Z]{16}", r"ASIA[0-9A-Z]{16}", r"xox[abprs]-[A-Za-z0-9-]{10,}",
    r"glpat-[A-Za-z0-9_-]{20,}", r"AIza[0-9A-Za-z_-]{35}", r"npm_[A-Za-z0-9]{36}",
    r"eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]+",
]
_TOKEN = re.compile("(?<![A-Za-z0-9])(?:" + "|".join(_TOKEN_SHAPES) + ")")
_PEM = re.compile(r"-----BEGIN ((?:[A-Z0-9]+ )*)PRIVATE KEY( BLOCK)?-----.*?(?:-----END ((?:[A-Z0-9]+ )*)PRIVATE KEY"
                  r"( BLOCK)?-----|\Z)", re.S)
_URL_CRED = re.compile(r"(?P<pre>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^/\s:@\"'<>]+)(?::(?P<pw>[^/\s@\"'<>]+))?@")
_HEADER = re.compile(r"(?P<pre>\b(?:proxy-)?authorization\s*:\s*|\bcookie\s*:\s*|\bx-api-key\s*:\s*|"
                     r"\bx-auth-token\s*:\s*|\bapi-key\s*:\s*)"
                     r"(?P<scheme>(?:bearer|basic|token|digest|negotiate)\s+)?(?P<value>[^\s\"',;]+)", re.I)
# NAME=value / NAME: value / "NAME": "value" with a secret NAME (checked by is_secret_key).
_NAME_VALUE = re.compile(r"(?P<q1>[\"']?)(?P<name>[A-Za-z_][A-Za-z0-9_.-]*)(?P=q1)(?P<sep>\s*(?:=|:(?!//))\s*)"
                         r"(?P<value>\"[^\"\n]*\"|'[^'\n]*'|[^\s\"',;}\])]+)")
# --flag value / --flag=value in a command string.
_FLAG = re.compile(r"(?<![\w-])(?P<flag>--?[A-Za-z][A-Za-z0-9_.-]*)(?P<sep>=|[ \t]+|[\"'][ \t]*,[ \t]*[\"'])"
                   r"(?P<value>\"[^\"\n]*\"|'[^'\n]*'|[^\s\"',\]]+)")
_SHORT_SECRET_FLAGS = {"-p"}


def words(name: str) -> list[str]:
    return [w.lower() for w in _WORD_SPLIT.split(name) if w]


def is_secret_key(name: Any) -> bool:
    """True for names of secrets (whole words, see the module docstring)."""
    if not isinstance(name, str) or not name:
        return False
    ws = words(name)
    if not ws:
        return False
    if any(w in _SECRET_WORDS for w in ws):
        return True
    for a, b in zip(ws, ws[1:]):
        if (a, b) in {("api", "key"), ("access", "key"), ("secret", "key"), ("private", "key"), ("session", "id"),
                      ("client", "secret"), ("account", "key"), ("signing", "key"), ("encryption", "key"),
                      ("master", "key"), ("auth", "key")}:
            return True
    if ws[-1] == "key":
        return len(ws) > 1 and ws[-2] not in _PLAIN_KEY_PREFIX
    return False


def is_secret_flag(flag: str) -> bool:
    """``--token``, ``--api-key``, ``--db-password``, ``--auth``, ``-p``..."""
    if flag in _SHORT_SECRET_FLAGS:
        return True
    return flag.startswith("--") and "=" not in flag and is_secret_key(flag[2:])


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def _is_real(value: str) -> bool:
    v = _unquote(value).strip()
    return v.lower() not in _NOT_SECRET_VALUES and REDACTED not in v


class Redactor:
    """Learn the secrets of everything about to leave, then redact it all with the same rules."""

    def __init__(self) -> None:
        self.literals: set[str] = set()

    # ------------------------------------------------------------------ learning
    def _learn_value(self, value: Any) -> None:
        if isinstance(value, Mapping):
            for v in value.values():
                self._learn_value(v)
        elif isinstance(value, (list, tuple, set)):
            for v in value:
                self._learn_value(v)
        elif isinstance(value, (str, int, float)) and not isinstance(value, bool):
            text = _unquote(str(value)).strip()
            if _is_real(text) and len(text) >= 4:
                self.literals.add(text)
                for line in text.splitlines():  # PEM bodies: each line on its own too
                    if len(line.strip()) >= 8:
                        self.literals.add(line.strip())

    def learn(self, obj: Any) -> Redactor:
        """Collect the secret values found in ``obj`` (objects, argv lists, strings); returns self."""
        if isinstance(obj, Mapping):
            for k, v in obj.items():
                if is_secret_key(k):
                    self._learn_value(v)
                else:
                    self.learn(k)
                    self.learn(v)
        elif isinstance(obj, (list, tuple)):
            items = list(obj)
            for i, v in enumerate(items):
                if isinstance(v, str) and is_secret_flag(v) and i + 1 < len(items):
                    self._learn_value(items[i + 1])
                self.learn(v)
        elif isinstance(obj, str):
            self.learn_text(obj)
        return self

    def learn_text(self, text: str) -> Redactor:
        for m in _PEM.finditer(text):
            self._learn_value(m.group(0))
        for m in _TOKEN.finditer(text):
            self._learn_value(m.group(0))
        for m in _URL_CRED.finditer(text):
            if m.group("pw"):
                self._learn_value(m.group("pw"))
        for m in _HEADER.finditer(text):
            self._learn_value(m.group("value"))
        for m in _NAME_VALUE.finditer(text):
            if is_secret_key(m.group("name")) and _is_real(m.group("value")):
                self._learn_value(m.group("value"))
        for m in _FLAG.finditer(text):
            if is_secret_flag(m.group("flag")) and _is_real(m.group("value")):
                self._learn_value(m.group("value"))
        return self

    # ------------------------------------------------------------------ redacting
    def text(self, text: str) -> str:
        """Redact a string: contexts (PEM, headers, URL credentials, NAME=value, --flag value), token shapes, literals."""
        if not text:
            return text
        text = _PEM.sub(REDACTED, text)
        text = _HEADER.sub(lambda m: m.group("pre") + (m.group("scheme") or "") + REDACTED, text)
        text = _URL_CRED.sub(lambda m: m.group("pre") + REDACTED + "@", text)  # user-only userinfo too (a token)
        text = _NAME_VALUE.sub(self._name_value, text)
        text = _FLAG.sub(self._flag_value, text)
        text = _TOKEN.sub(REDACTED, text)
        return self._literals(text)

    @staticmethod
    def _name_value(m: re.Match[str]) -> str:
        if not is_secret_key(m.group("name")) or not _is_real(m.group("value")):
            return m.group(0)
        v = m.group("value")
        quote = v[0] if v[:1] in ("\"", "'") and v[-1:] == v[:1] and len(v) >= 2 else ""
        return f"{m.group('q1')}{m.group('name')}{m.group('q1')}{m.group('sep')}{quote}{REDACTED}{quote}"

    @staticmethod
    def _flag_value(m: re.Match[str]) -> str:
        if not is_secret_flag(m.group("flag")) or not _is_real(m.group("value")):
            return m.group(0)
        v = m.group("value")
        quote = v[0] if v[:1] in ("\"", "'") and v[-1:] == v[:1] and len(v) >= 2 else ""
        return f"{m.group('flag')}{m.group('sep')}{quote}{REDACTED}{quote}"

    def _literals(self, text: str) -> str:
        for lit in sorted(self.literals, key=len, reverse=True):
            if lit not in text:
                continue
            if len(lit) >= 8:
                text = text.replace(lit, REDACTED)
            else:
                text = re.sub(r"(?<![A-Za-z0-9_])" + re.escape(lit) + r"(?![A-Za-z0-9_])", REDACTED, text)
        return text

    def argv(self, argv: Iterable[Any]) -> list[Any]:
        """An argv list: the value after a secret flag goes, then every element as text."""
        items = list(argv)
        out: list[Any] = []
        hide_next = False
        for v in items:
            if hide_next:
                out.append(REDACTED if v is not None else v)
                hide_next = False
                continue
            if isinstance(v, str):
                hide_next = is_secret_flag(v)
                out.append(self.text(v))
            else:
                out.append(self.obj(v))
        return out

    def obj(self, obj: Any) -> Any:
        """A JSON/YAML-like object: secret keys lose their whole value; keys and strings are redacted as text."""
        if isinstance(obj, Mapping):
            out = {}
            for k, v in obj.items():
                key = self.text(k) if isinstance(k, str) else k
                out[key] = (REDACTED if v is not None and v != "" else v) if is_secret_key(k) else self.obj(v)
            return out
        if isinstance(obj, (list, tuple)):
            if any(isinstance(v, str) for v in obj):
                return self.argv(obj)
            return [self.obj(v) for v in obj]
        if isinstance(obj, str):
            return self.text(obj)
        return obj

    # ------------------------------------------------------------------ verifying
    def leaks(self, text: str) -> list[str]:
        """What in ``text`` still looks secret (empty when clean): learned literals and contextual matches."""
        found = []
        for lit in self.literals:
            if lit in text and (len(lit) >= 8 or re.search(
                    r"(?<![A-Za-z0-9_])" + re.escape(lit) + r"(?![A-Za-z0-9_])", text)):
                found.append(f"a learned secret value ({len(lit)} characters)")
        for pat, what in ((_PEM, "a PEM private key"), (_TOKEN, "a token-shaped value")):
            if pat.search(text):
                found.append(what)
        if _URL_CRED.search(text):
            found.append("URL credentials")
        for m in _HEADER.finditer(text):
            if _is_real(m.group("value")):
                found.append("an authorization header value")
        for m in _NAME_VALUE.finditer(text):
            if is_secret_key(m.group("name")) and _is_real(m.group("value")):
                found.append(f"a value of {m.group('name')}")
        for m in _FLAG.finditer(text):
            if is_secret_flag(m.group("flag")) and _is_real(m.group("value")):
                found.append(f"the value of {m.group('flag')}")
        return found


# --------------------------------------------------------------------------- convenience
def redact_text(text: str, learn_from: Any = None) -> str:
    r = Redactor()
    if learn_from is not None:
        r.learn(learn_from)
    r.learn_text(text)
    return r.text(text)


def redact_obj(obj: Any) -> Any:
    """Redact a JSON-like object on its own (secrets learned from the object itself)."""
    return Redactor().learn(obj).obj(obj)


def redact_argv(argv: Iterable[Any]) -> list[Any]:
    items = list(argv)
    return Redactor().learn(items).argv(items)


def argv_holds_secret(argv: Any) -> bool:
    """Whether a command line (an argv list) holds anything the rules above would redact: a command
    printed for the user to run (``diff``'s ``next:``) is then not printed as recorded."""
    if not isinstance(argv, (list, tuple)):
        return False
    items = [str(x) for x in argv]
    return redact_argv(items) != items
