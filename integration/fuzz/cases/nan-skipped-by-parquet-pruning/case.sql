-- found: --seed 92001 query 2534 (NoREC)
-- mode: partitioned
-- difference: 1 rows expected, 1 rows given; first difference: missing ["2600"]
-- kept: finding 22 (docs/correctness.md): NaN rows skipped by Parquet statistics pruning; the count must equal the CASE sum
-- table: t1
SELECT count(*) AS c0 FROM t1 a0 JOIN t1 a1 ON true WHERE a1.f >= 1.25
-- equals:
SELECT coalesce(sum(CASE WHEN (a1.f >= 1.25) THEN 1 ELSE 0 END), 0) AS c0 FROM t1 a0 JOIN t1 a1 ON true
