"""8 clients inserting into one table while another rewrites it with UPDATE:
the check both the one-host and the multi-host tests make."""


def check_concurrent_writes(client, uri, sql, table="conc", updaters=1):
    """8 clients inserting while `updaters` others rewrite the table with
    UPDATE: every acknowledged INSERT is there, every acknowledged UPDATE
    took effect on the rows it saw, refusals are ABORTED (two rewrites of
    the same files cannot both commit). Returns what happened."""
    sql(f"CREATE TABLE {table} (k BIGINT, v BIGINT)")
    outcome = client.call(op="concurrent", uri=uri, table=table, clients=8, inserts=20,
                          updaters=updaters)
    inserted, updates = outcome["inserted"], outcome["updates"]
    rows = sql(f"SELECT k, v FROM {table} ORDER BY k")[0]
    keys = [k for k, _ in rows]
    assert sorted(inserted) == keys, (len(inserted), len(keys), outcome["insert_errors"][:3])
    for error in outcome["insert_errors"] + outcome["update_errors"]:
        assert "(Aborted;" in error, error
    assert updates, "no UPDATE went through"
    # Each row was raised once by every UPDATE committed after it was: v
    # is at most the number of UPDATEs, and the rows present through all of
    # them (the first inserted) carry every one.
    assert all(0 <= v <= len(updates) for _, v in rows)
    assert max(v for _, v in rows) >= 1
    total = sum(v for _, v in rows)
    assert total == sum(updates), (total, sum(updates))
    return outcome
