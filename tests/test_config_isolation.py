"""``[service.isolation]``: the allow-list, local ports and HTTP downstreams, checked once."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from hairline.config.experiment import ServiceConfig
from hairline.config.isolation import IsolationConfig, is_loopback


def test_downstreams_are_the_allow_list_and_the_http_services_sorted_and_unique() -> None:
    isolation = IsolationConfig.model_validate(
        {
            "allow": ["127.0.0.1:5432", "10.0.0.5:6379", "127.0.0.1:5432"],
            "local_ports": [11211],
            "http": [{"address": "127.0.0.1:9000"}, {"address": "10.0.0.5:6379"}],
        }
    )
    assert isolation.downstreams() == ["10.0.0.5:6379", "127.0.0.1:5432", "127.0.0.1:9000"]
    assert isolation.http[0].forward == ["GET", "HEAD"]
    assert isolation.http[0].drop_status == 200


def test_an_address_without_a_port_names_its_index_and_what_to_write() -> None:
    with pytest.raises(ValidationError) as err:
        IsolationConfig(allow=["127.0.0.1:5432", "10.0.0.1:80", "127.0.0.1"])
    assert "allow[2]: '127.0.0.1' has no port; write host:port" in str(err.value)


@pytest.mark.parametrize(
    ("address", "says"),
    [("db.internal:5432", "not an IPv4 address"), ("127.0.0.1:0", "from 1 to 65535")],
)
def test_names_and_bad_ports_are_refused(address: str, says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        IsolationConfig(allow=[address])


def test_forward_rules_are_methods_or_method_and_path() -> None:
    IsolationConfig.model_validate(
        {"http": [{"address": "127.0.0.1:9000", "forward": ["GET", "POST /v1/lookup"]}]}
    )
    with pytest.raises(ValidationError, match=r"forward\[1\]: 'post /x'"):
        IsolationConfig.model_validate(
            {"http": [{"address": "127.0.0.1:9000", "forward": ["GET", "post /x"]}]}
        )


def test_a_service_without_the_table_is_not_isolated() -> None:
    assert ServiceConfig(name="s", start="x").isolation is None
    service = ServiceConfig.model_validate(
        {"name": "s", "start": "x", "isolation": {"allow": ["127.0.0.1:5432"]}}
    )
    assert service.isolation is not None and is_loopback(service.isolation.allow[0])
