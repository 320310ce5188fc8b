-- Query shapes whose stage cuts the TPC-H queries at small scale do not all
-- reach. One statement per line; `--` lines are comments. Results are
-- compared with single-node DataFusion (ordered when the query has ORDER BY
-- at the end).
-- Partitioned joins whose build side is empty in most partitions, or rare.
SELECT count(*) AS n, sum(l_quantity) AS q FROM lineitem l JOIN (SELECT * FROM orders WHERE o_orderkey = 1) o ON l.l_orderkey = o.o_orderkey
SELECT count(*) AS n FROM lineitem l JOIN (SELECT * FROM orders WHERE o_orderkey < 200) o ON l.l_orderkey = o.o_orderkey
SELECT l_orderkey, l_linenumber, o_orderdate FROM lineitem JOIN orders ON l_orderkey = o_orderkey WHERE o_orderkey IN (7, 32, 33) ORDER BY l_orderkey, l_linenumber
SELECT count(*) AS n FROM (SELECT * FROM orders WHERE o_orderkey = -1) o JOIN lineitem l ON l.l_orderkey = o.o_orderkey
-- Semi, anti, outer and full joins.
SELECT count(*) AS n FROM orders WHERE o_orderkey IN (SELECT l_orderkey FROM lineitem WHERE l_quantity > 49)
SELECT count(*) AS n FROM orders WHERE NOT EXISTS (SELECT 1 FROM lineitem WHERE l_orderkey = o_orderkey AND l_quantity > 45)
SELECT count(*) AS n FROM customer WHERE c_custkey NOT IN (SELECT o_custkey FROM orders)
SELECT c_custkey, count(o_orderkey) AS orders FROM customer LEFT JOIN orders ON c_custkey = o_custkey AND o_totalprice > 300000 GROUP BY c_custkey ORDER BY c_custkey
SELECT count(*) AS n, count(o_orderkey) AS matched FROM orders RIGHT JOIN customer ON c_custkey = o_custkey
SELECT count(*) AS n, count(s_suppkey) AS s, count(c_custkey) AS c FROM supplier FULL OUTER JOIN customer ON s_nationkey = c_nationkey AND s_suppkey = c_custkey
SELECT n_name, count(*) AS n FROM nation LEFT JOIN supplier ON n_nationkey = s_nationkey AND s_acctbal > 9000 GROUP BY n_name ORDER BY n_name
-- Unions.
SELECT count(*) AS n FROM (SELECT c_nationkey AS k FROM customer UNION ALL SELECT s_nationkey FROM supplier UNION ALL SELECT n_nationkey FROM nation)
SELECT k FROM (SELECT c_nationkey AS k FROM customer UNION SELECT s_nationkey FROM supplier) ORDER BY k
-- Window functions.
SELECT o_custkey, o_orderkey, row_number() OVER (PARTITION BY o_custkey ORDER BY o_orderdate, o_orderkey) AS rn FROM orders WHERE o_custkey < 50 ORDER BY o_custkey, rn
SELECT l_orderkey, sum(l_extendedprice) OVER (ORDER BY l_orderkey, l_linenumber ROWS BETWEEN 3 PRECEDING AND CURRENT ROW) AS s FROM lineitem WHERE l_orderkey < 100 ORDER BY l_orderkey, s
SELECT n_regionkey, n_name, rank() OVER (PARTITION BY n_regionkey ORDER BY n_name DESC) AS r FROM nation ORDER BY n_regionkey, r
-- Grouping sets.
SELECT l_returnflag, l_linestatus, count(*) AS n, sum(l_quantity) AS q FROM lineitem GROUP BY GROUPING SETS ((l_returnflag), (l_linestatus), ()) ORDER BY l_returnflag, l_linestatus
SELECT n_regionkey, n_nationkey, count(*) AS n FROM nation GROUP BY ROLLUP (n_regionkey, n_nationkey) ORDER BY n_regionkey, n_nationkey
SELECT l_returnflag, l_shipmode, count(*) AS n FROM lineitem GROUP BY CUBE (l_returnflag, l_shipmode) ORDER BY l_returnflag, l_shipmode
-- LIMIT inside subqueries, and early-stopping consumers.
SELECT count(*) AS n FROM (SELECT * FROM lineitem LIMIT 100)
SELECT t.l_orderkey, o_orderdate FROM (SELECT l_orderkey FROM lineitem ORDER BY l_orderkey DESC LIMIT 10) t JOIN orders ON t.l_orderkey = o_orderkey ORDER BY t.l_orderkey
SELECT count(*) AS n FROM orders WHERE o_custkey IN (SELECT c_custkey FROM customer ORDER BY c_acctbal DESC LIMIT 20)
SELECT l_orderkey FROM lineitem ORDER BY l_extendedprice DESC, l_orderkey LIMIT 5
-- Count distinct.
SELECT count(DISTINCT l_partkey) AS p, count(DISTINCT l_suppkey) AS s FROM lineitem
SELECT l_returnflag, count(DISTINCT l_orderkey) AS o FROM lineitem GROUP BY l_returnflag ORDER BY l_returnflag
-- Scalar subqueries and cross joins.
SELECT count(*) AS n FROM lineitem WHERE l_quantity > (SELECT avg(l_quantity) FROM lineitem)
SELECT r_name, n_name FROM region CROSS JOIN nation WHERE n_regionkey = r_regionkey ORDER BY r_name, n_name
