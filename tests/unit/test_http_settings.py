"""ServerSettings: API key checks, key files, CORS origins, the OpenAPI document."""

from __future__ import annotations

from pathlib import Path

import pytest

from skippy.http.openapi import openapi_document
from skippy.http.settings import ServerSettings, read_api_key_file, split_origins


def test_key_accepted_only_for_exact_keys() -> None:
    s = ServerSettings(api_keys=("sk-alpha", "sk-beta-longer"))
    assert s.auth_required
    assert s.key_accepted("sk-alpha") and s.key_accepted("sk-beta-longer")
    for wrong in ("", "sk-alph", "sk-alphaa", "SK-ALPHA", "sk-beta", "sk-alpha sk-beta-longer", "ü"):
        assert not s.key_accepted(wrong)
    assert not ServerSettings().auth_required


def test_key_file(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text("# team keys\n\n  sk-one  \nsk-two\n")
    assert read_api_key_file(path) == ["sk-one", "sk-two"]
    path.write_text("# nothing\n\n")
    with pytest.raises(ValueError):
        read_api_key_file(path)


def test_origins() -> None:
    assert split_origins(["https://a.example/, https://b.example", "https://a.example"]) == \
        ("https://a.example", "https://b.example")
    s = ServerSettings(cors_origins=("https://a.example",))
    assert s.origin_allowed("https://a.example") and not s.origin_allowed("https://evil.example")
    assert ServerSettings(cors_origins=("*",)).origin_allowed("https://any.example")
    assert not ServerSettings().origin_allowed("https://a.example")


def test_openapi_document_security() -> None:
    open_doc = openapi_document(auth=False)
    assert "security" not in open_doc
    doc = openapi_document(auth=True)
    assert doc["security"] == [{"bearer": []}]
    assert doc["paths"]["/health"]["get"]["security"] == []
    assert doc["components"]["schemas"]["Message"]["properties"]["role"]["enum"]
