"""Well-known secrets: passwords and tokens an attacker tries first.

Owns one check, ``well_known(secret, user)``: the reason a secret that passes the
length rules is still among the first guesses, or None. A secret is well known when,
lower-cased, with common letter-for-digit swaps undone (p@ssw0rd is password) and its
digits and punctuation taken away, what is left is a common password word or the
user's name (or several of those, or one repeated), or nothing at all (only digits
and punctuation); or when it is a run of
neighbouring keys or characters (qwertyuiop123, 123456789012, abcdefghijkl). A short
list on purpose: the length rules do the rest, and the dashboard checks this once at
start-up.
"""

from __future__ import annotations

import itertools
import re

COMMON = frozenset({
    "password", "passwort", "passwd", "pass", "admin", "administrator", "root", "user",
    "guest", "test", "tester", "testing", "login", "letmein", "welcome", "changeme",
    "change", "secret", "default", "master", "qwerty", "azerty", "asdf", "iloveyou",
    "monkey", "dragon", "sunshine", "princess", "football", "baseball", "soccer", "hockey",
    "superman", "batman", "trustno", "shadow", "michael", "jennifer", "jordan", "hunter",
    "killer", "access", "whatever", "freedom", "starwars", "computer", "internet",
    "server", "service", "dashboard", "kiln", "kilnjobs", "jobs", "worker", "postgres",
    "postgresql", "mysql", "mariadb", "sqlite", "database", "qwertyuiop", "asdfghjkl",
    "zxcvbnm", "abc", "abcdef", "abcdefgh", "hello", "helloworld", "opensesame", "god",
    "love", "summer", "winter", "spring", "autumn", "fall",
})
SWAPS = str.maketrans({"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t",
                       "@": "a", "$": "s", "!": "i", "+": "t"})
RUNS = ("qwertyuiopasdfghjklzxcvbnm", "1234567890", "abcdefghijklmnopqrstuvwxyz",
        "qazwsxedcrfvtgbyhnujmikolp")


def _stem(secret: str) -> str:
    """The secret without case, swaps, digits and punctuation (p4ssw0rd-2024! -> password)."""
    lowered = secret.lower()
    swapped = re.sub(r"^[\W\d_]+|[\W\d_]+$", "", lowered)  # strip leading/trailing decoration
    swapped = swapped.translate(SWAPS)
    return re.sub(r"[\W\d_]+", "", swapped)


def _is_run(secret: str) -> bool:
    """Every character follows the one before on a keyboard row or in the alphabet (either
    way, wrapping from one run to another: qwertyuiop123, 0987654321ab)."""
    text = secret.lower()
    steps = 0
    for a, b in itertools.pairwise(text):
        if not any(a + b in run or b + a in run for run in RUNS):
            steps += 1
    return steps <= 1  # one join between two runs (qwerty + 123) is still a run


def _unit(text: str) -> str:
    """The shortest piece ``text`` repeats (adminadmin -> admin)."""
    for size in range(1, len(text) // 2 + 1):
        if len(text) % size == 0 and text[:size] * (len(text) // size) == text:
            return text[:size]
    return text


def _words(text: str, words: frozenset[str]) -> bool:
    """``text`` is nothing but ``words`` end to end (kilndashboard, letmeinadmin)."""
    ends = [True] + [False] * len(text)
    for end in range(1, len(text) + 1):
        ends[end] = any(ends[start] and text[start:end] in words
                        for start in range(max(0, end - 16), end))
    return ends[-1]


def well_known(secret: str, user: str = "") -> str | None:
    """Why ``secret`` is among the first guesses, or None."""
    stem = _unit(_stem(secret))
    if not stem:
        return "only digits and punctuation"
    names = {n for n in (_stem(user), user.lower()) if n}
    if stem in names or _words(stem, frozenset(names)):
        return "the user name"
    if _words(stem, COMMON | names):
        return "common password words with digits or symbols around them"
    if _is_run(secret):
        return "a run of neighbouring keys or letters"
    return None
