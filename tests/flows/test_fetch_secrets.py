"""A scraping API key from a Prefect Secret block (issue 8): never a flow parameter."""

from __future__ import annotations

import uuid

from prefect.blocks.system import Secret

from tasks.fetch.settings import FetchSettings


def test_the_api_key_comes_from_a_named_secret_block(prefect_server):
    name = f"recrawl-api-key-{uuid.uuid4().hex[:8]}"
    Secret(value="sk-from-a-block").save(name)
    settings = FetchSettings(mode="api", api_url="http://api.test", api_key_block=name)
    assert settings.api_key is None  # nothing is read until a run asks for it
    loaded = settings.with_secrets()
    assert loaded.api_key is not None and loaded.api_key.get_secret_value() == "sk-from-a-block"
    assert "sk-from-a-block" not in repr(loaded) and "sk-from-a-block" not in str(loaded)
    assert FetchSettings().with_secrets() == FetchSettings()  # no block named: unchanged
