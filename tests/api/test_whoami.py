"""``GET /v1/whoami`` describes the token in use to its holder, and only it: tenancy, name,
scope and expiry, never a secret; another tenancy's tokens cannot be asked about; a revoked
or missing token gets 401. It is in the OpenAPI schema."""

from __future__ import annotations

from tests.api.conftest import new_tenancy
from tests.api.harness import ApiServer


def test_whoami_describes_the_caller_only(module_api: ApiServer) -> None:
    with module_api.client() as admin:
        owner = new_tenancy(admin, "whoami-a")
        other = new_tenancy(admin, "whoami-b")
        me = admin.get("/v1/whoami").json()
        assert me["tenancy"] is None and me["scope"] == "admin"
    with module_api.client(owner) as c:
        minted = c.post(
            "/v1/tokens", json={"name": "dash", "scope": "read", "expires_at": "2099-01-02T03:04:05Z"}
        ).json()
        mine = c.get("/v1/whoami")
        assert mine.status_code == 200, mine.text
        assert mine.json() == {
            "token_id": mine.json()["token_id"],
            "token_name": "test",
            "tenancy": "whoami-a",
            "scope": "admin",
            "expires_at": None,
        }
        # it takes no tenancy argument: asking about another tenancy changes nothing
        assert c.get("/v1/whoami", params={"tenancy": "whoami-b"}).json()["tenancy"] == "whoami-a"
    with module_api.client(minted["token"]) as d:
        body = d.get("/v1/whoami").json()
    assert body == {
        "token_id": minted["id"],
        "token_name": "dash",
        "tenancy": "whoami-a",
        "scope": "read",
        "expires_at": "2099-01-02T03:04:05Z",
    }
    assert minted["token"] not in str(body)
    with module_api.client(other) as b:
        assert b.get("/v1/whoami").json()["tenancy"] == "whoami-b"
    with module_api.client(owner) as c:
        assert c.delete(f"/v1/tokens/{minted['id']}").status_code == 204
    with module_api.client(minted["token"]) as d:
        assert d.get("/v1/whoami").status_code == 401
    with module_api.client(None) as anon:
        assert anon.get("/v1/whoami").status_code == 401
        spec = anon.get("/openapi.json").json()
    op = spec["paths"]["/v1/whoami"]["get"]
    assert op["responses"]["200"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/WhoAmI"}
    assert set(spec["components"]["schemas"]["WhoAmI"]["properties"]) == {
        "token_id",
        "token_name",
        "tenancy",
        "scope",
        "expires_at",
    }
