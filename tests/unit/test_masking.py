"""How a secret written into bootstrap.servers (`user:password@host`) is hidden: whatever the password holds ('@',
',', spaces, ':'), however many servers the value lists, no character of it is shown, and the rest stays readable."""

from __future__ import annotations

import pytest

from streamrepl import masking
from streamrepl.registry import Cluster

PW = "Pa55-Planted"


@pytest.mark.parametrize(
    ("value", "password", "shown"),
    [
        ("admin:Pa55@word@host:9092", "Pa55@word", "admin:********@host:9092"),
        ("admin:Pa55,word@host:9092", "Pa55,word", "admin:********@host:9092"),
        ("admin:Pa55 word@host:9092", "Pa55 word", "admin:********@host:9092"),
        ("admin:Pa:55@host:9092", "Pa:55", "admin:********@host:9092"),
        ("admin:a@b,c d@host:9092", "a@b,c d", "admin:********@host:9092"),
        ("admin:Pa55@word@h1:9092,h2:9092", "Pa55@word", "admin:********@h1:9092,h2:9092"),
        ("h1:9092,admin:Pa55@word@h2:9092", "Pa55@word", "h1:9092,admin:********@h2:9092"),
        ("h1:9092, admin:Pa55,w@h2:9092", "Pa55,w", "h1:9092, admin:********@h2:9092"),
        ("SASL_SSL://admin:Pa55@w@h:9092", "Pa55@w", "SASL_SSL://admin:********@h:9092"),
        ("[::1]:9092,admin:Pa55@[::1]:9093", "Pa55", "[::1]:9092,admin:********@[::1]:9093"),
        # A user name alone, or a password alone: what stands before the '@' is hidden either way.
        ("Pa55@host:9092", "Pa55", "********@host:9092"),
        # A password that begins like a port: nothing before the '@' can be told apart, so all of it is hidden.
        ("admin:9092,x@host:9092", "admin:9092,x", "********@host:9092"),
    ],
)
def test_a_password_in_an_address_is_hidden_whole(value: str, password: str, shown: str) -> None:
    assert masking.mask_address(value) == shown
    assert password in masking.address_secrets(value)
    assert password not in shown


def test_two_servers_with_passwords_hide_everything_between_the_first_user_and_the_last_host() -> None:
    value = "a:p1@x@h1:9092,b:p2,y@h2:9092"
    shown = masking.mask_address(value)
    assert shown == "a:********@h2:9092"
    for piece in ("p1@x", "p2,y", "p1", "p2"):
        assert piece not in shown


@pytest.mark.parametrize("value", ["h1:9092", "h1:9092,h2:9092", "[::1]:9092", "PLAINTEXT://h:1"])
def test_an_address_with_no_password_is_shown_as_written(value: str) -> None:
    assert masking.mask_address(value) == value
    assert masking.address_secrets(value) == []


def test_the_pieces_a_client_splits_a_password_into_are_secrets_too() -> None:
    """librdkafka splits bootstrap.servers at ',' and spaces: its errors may quote a piece of the password."""
    secrets = masking.address_secrets(f"admin:{PW}-one,{PW}-two three@host:9092")
    assert f"{PW}-one" in secrets and f"{PW}-two" in secrets and "three" in secrets
    text = f"Failed to resolve '{PW}-two three@host:9092' and 'admin:{PW}-one'"
    assert PW not in masking.scrub(text, secrets)


def test_scrub_replaces_the_longest_secret_first() -> None:
    assert masking.scrub("x abc-def y", ["abc", "abc-def"]) == f"x {masking.MASK} y"


@pytest.mark.parametrize(
    "value", ["admin:Pa55@word@host:1", "admin:Pa55,word@host:1", "admin:Pa55 word@host:1", "a:Pa55@w@h:1,b:x,y@h2:1"]
)
def test_a_cluster_shows_and_scrubs_its_address_with_the_one_function(value: str) -> None:
    c = Cluster("a", {"bootstrap.servers": value, "sasl.password": PW})
    for text in (c.shown_bootstrap, repr(c), str(c.masked())):
        assert "Pa55" not in text and PW not in text
    assert masking.scrub(f"broker {value} refused {PW}", c.secrets()).count("Pa55") == 0
