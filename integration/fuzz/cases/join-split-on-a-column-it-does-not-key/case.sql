-- found: --seed 12001 query 2956 (differential)
-- mode: partitioned
-- difference: 101 rows expected, 0 rows given; first difference: missing ["1"]; answers right with squadron.key_range_splits = false
-- cause: key range splits cut both inputs of a partitioned self-join (a0.k0 = a1.k2)
--   by the same cuts, a0 on k0 for the anti join above and a1 on k0 for the join
--   above that; the cuts agreed, the columns did not, so a0.k0 met a1.k2 of another
--   range (finding 11; planner/src/key_range_splits: a join's splits must be on its keys)
-- table: t2 sorted
-- table: t3
SELECT a1.k2 AS c0 FROM t2 a0 JOIN t2 a1 ON a1.k2 = a0.k0 LEFT ANTI JOIN t3 a2 ON a2.k0 = a0.k0 JOIN t3 a3 ON a3.k2 = a1.k0
