"""Drives abacus's OpenTSDB-compatible API with pyopentsdb, an OpenTSDB client from PyPI, and
prints what it got as one JSON object for opentsdb.TestPyOpenTSDBClient to check.

Usage: python pyopentsdb_client.py BASE_URL START_SECONDS END_SECONDS
"""
import datetime
import json
import sys

from pyopentsdb import errors, tsdb


def main():
    base, start, end = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    utc = datetime.timezone.utc
    conn = tsdb.tsdb_connection(base)
    out = {
        "version": conn.version(),
        "aggregators": conn.aggregators(),
        "filters": sorted(conn.filters().keys()),
        "metrics": conn.metrics(),
        "suggest_tagv": conn.suggest(type="tagv", q="device-", max=10),
    }
    # A query with filters and a downsample, and one with tags and a rate; pyopentsdb sends start
    # and end as Unix seconds and every flag of its query model.
    out["query_filters"] = conn.query(
        start=datetime.datetime.fromtimestamp(start, utc),
        end=datetime.datetime.fromtimestamp(end, utc),
        metrics=[{
            "metric": "devices.minute.count",
            "aggregator": "sum",
            "downsample": "10m-sum",
            "filters": [{"type": "wildcard", "tagk": "entity", "filter": "device-*", "groupBy": True}],
        }],
        show_query=True,
    )
    out["query_tags"] = conn.query(
        start=datetime.datetime.fromtimestamp(start, utc),
        end=datetime.datetime.fromtimestamp(end, utc),
        metrics=[{"metric": "devices.minute.temp_q", "aggregator": "max", "tags": {"entity": "device-002"}}],
    )
    # An error in OpenTSDB's shape reaches the client as its ArgumentError with the message.
    try:
        conn.query(start=datetime.datetime.fromtimestamp(start, utc),
                   metrics=[{"metric": "devices.minute.nope", "aggregator": "sum"}])
        out["error"] = None
    except errors.ArgumentError as e:
        out["error"] = str(e)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
