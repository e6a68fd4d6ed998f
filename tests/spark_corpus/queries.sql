-- WaveSQL Spark SQL compatibility corpus.
--
-- Every query here must run on plain Spark 4.x (ANSI mode, session time zone UTC) over the
-- tables written by tests/spark_corpus/tables.py, and must have a deterministic result
-- MULTISET: window ORDER BYs carry tie-breakers (up to all columns, since fully identical
-- rows are interchangeable), ORDER BY ... LIMIT orders totally, collected arrays are
-- sorted, and nothing uses rand(), uuid(), current_timestamp() or TABLESAMPLE.
--
-- Format: one query per "-- name: <slug>" header (slugs unique; the prefix is the feature
-- category). Do not delete a query because sqlglot cannot round-trip it: those failures are
-- the point of the corpus (see check_corpus.py).
--
-- Tables:
--   orders(order_id INT, customer_id INT, order_ts TIMESTAMP, amount DOUBLE, status STRING,
--          items ARRAY<STRING>)
--   customers(customer_id INT, name STRING, country STRING, signup DATE, last_login TIMESTAMP)
--   events(id BIGINT, user_id INT, ts TIMESTAMP, kind STRING, value DOUBLE,
--          tags MAP<STRING, INT>, device STRUCT<os: STRING, version: INT>)
--   products(product_id INT, sku STRING, name STRING, category STRING, price DECIMAL(10,2),
--            weight DOUBLE, in_stock BOOLEAN)
--   ticks(sym STRING, ts TIMESTAMP, px DOUBLE, qty INT)

-- ===================================================================== joins

-- name: join_inner_orders_customers
SELECT o.order_id, c.name, c.country, o.amount
FROM orders o
JOIN customers c ON o.customer_id = c.customer_id

-- name: join_inner_using
SELECT customer_id, count(*) AS n_orders, sum(amount) AS total
FROM orders INNER JOIN customers USING (customer_id)
GROUP BY customer_id

-- name: join_left_orphan_orders
-- orders whose customer does not exist (or is NULL)
SELECT o.order_id, o.customer_id, c.country
FROM orders o
LEFT JOIN customers c ON o.customer_id = c.customer_id
WHERE c.customer_id IS NULL

-- name: join_left_outer_counts
SELECT c.customer_id, c.name, count(o.order_id) AS n_orders,
       coalesce(sum(o.amount), 0) AS total
FROM customers c
LEFT OUTER JOIN orders o ON c.customer_id = o.customer_id
GROUP BY c.customer_id, c.name

-- name: join_right_condition_in_on
-- the status filter in ON (not WHERE) keeps every order
SELECT c.name, o.order_id, o.status
FROM customers c
RIGHT JOIN orders o ON c.customer_id = o.customer_id AND o.status = 'paid'

-- name: join_full_outer_unmatched
SELECT coalesce(c.customer_id, o.customer_id) AS cid, c.name, o.order_id
FROM customers c
FULL OUTER JOIN orders o ON c.customer_id = o.customer_id
WHERE c.customer_id IS NULL OR o.order_id IS NULL

-- name: join_full_outer_aggregates
SELECT coalesce(o.cid, e.uid) AS id, o.n_orders, e.n_events
FROM (SELECT customer_id AS cid, count(*) AS n_orders FROM orders GROUP BY customer_id) o
FULL JOIN (SELECT user_id AS uid, count(*) AS n_events FROM events GROUP BY user_id) e
  ON o.cid = e.uid

-- name: join_left_semi
SELECT * FROM customers c
LEFT SEMI JOIN orders o ON c.customer_id = o.customer_id AND o.amount > 300

-- name: join_left_anti
SELECT c.customer_id, c.name FROM customers c
LEFT ANTI JOIN orders o ON c.customer_id = o.customer_id

-- name: join_anti_shorthand_null_keys
-- NULL customer_id never matches, so those orders are kept by the anti join
SELECT o.order_id, o.customer_id FROM orders o
ANTI JOIN customers c ON o.customer_id = c.customer_id

-- name: join_semi_shorthand_exploded
SELECT p.sku, p.name FROM products p
SEMI JOIN (SELECT explode(items) AS sku FROM orders) i ON p.sku = i.sku

-- name: join_cross
SELECT s.sym, k.kind
FROM (SELECT DISTINCT sym FROM ticks) s
CROSS JOIN (SELECT DISTINCT kind FROM events WHERE kind IS NOT NULL) k

-- name: join_comma_cartesian_filtered
SELECT a.status, b.country
FROM (SELECT DISTINCT status FROM orders) a, (SELECT DISTINCT country FROM customers) b
WHERE a.status IS NOT NULL AND b.country IS NOT NULL

-- name: join_three_way_products
SELECT c.country, p.category, count(*) AS n_lines, sum(p.price) AS revenue
FROM orders o
JOIN customers c ON o.customer_id = c.customer_id
JOIN (SELECT order_id, explode(items) AS sku FROM orders) i ON i.order_id = o.order_id
JOIN products p ON p.sku = i.sku
GROUP BY c.country, p.category

-- name: join_non_equi_condition
SELECT o.order_id, c.customer_id, c.last_login
FROM orders o
JOIN customers c ON o.customer_id = c.customer_id AND o.order_ts > c.last_login

-- name: join_null_safe_equality
SELECT a.status, count(*) AS pairs
FROM orders a JOIN orders b ON a.status <=> b.status AND a.order_id < b.order_id
GROUP BY a.status

-- name: join_natural
SELECT order_id, customer_id, name, amount FROM orders NATURAL JOIN customers

-- name: join_broadcast_hint
SELECT /*+ BROADCAST(c) */ c.country, count(*) AS n
FROM orders o JOIN customers c ON o.customer_id = c.customer_id
GROUP BY c.country

-- name: join_on_expression_keys
SELECT e.id, o.order_id
FROM events e
JOIN orders o ON e.user_id = o.customer_id AND to_date(e.ts) = to_date(o.order_ts)

-- name: join_left_with_where_on_right
-- a WHERE on the right side turns the left join into an inner join
SELECT c.customer_id, o.order_id
FROM customers c LEFT JOIN orders o ON c.customer_id = o.customer_id
WHERE o.status = 'shipped'

-- name: join_right_outer_product_lines
-- every product, with how often it was ordered (0 for never)
SELECT p.sku, count(i.order_id) AS times_ordered
FROM (SELECT order_id, explode(items) AS sku FROM orders) i
RIGHT OUTER JOIN products p ON i.sku = p.sku
GROUP BY p.sku

-- name: join_full_outer_using
SELECT customer_id, c.name, o.n
FROM customers c
FULL OUTER JOIN (SELECT customer_id, count(*) AS n FROM orders GROUP BY customer_id) o
USING (customer_id)

-- name: join_right_multiple_keys
SELECT e.user_id, e.kind, o.status, o.order_id
FROM events e
RIGHT JOIN orders o ON e.user_id = o.customer_id AND to_date(e.ts) = to_date(o.order_ts)
WHERE o.order_id <= 60

-- ===================================================================== self joins

-- name: selfjoin_same_country_pairs
SELECT a.customer_id AS a_id, b.customer_id AS b_id, a.country
FROM customers a JOIN customers b
  ON a.country = b.country AND a.customer_id < b.customer_id

-- name: selfjoin_same_name
SELECT a.name, a.customer_id AS first_id, b.customer_id AS other_id
FROM customers a JOIN customers b ON a.name = b.name AND a.customer_id < b.customer_id

-- name: selfjoin_next_order_time
SELECT a.order_id, a.customer_id, min(b.order_ts) AS next_ts
FROM orders a
JOIN orders b ON a.customer_id = b.customer_id AND b.order_ts > a.order_ts
GROUP BY a.order_id, a.customer_id

-- name: selfjoin_latest_order_per_customer
-- classic "no later row" anti pattern
SELECT a.customer_id, a.order_id, a.order_ts
FROM orders a
LEFT JOIN orders b
  ON a.customer_id = b.customer_id
 AND (b.order_ts > a.order_ts OR (b.order_ts = a.order_ts AND b.order_id > a.order_id))
WHERE b.order_id IS NULL AND a.customer_id IS NOT NULL AND a.order_ts IS NOT NULL

-- name: selfjoin_ticks_trailing_band
SELECT a.sym, a.ts, a.px, count(*) AS n_in_band, avg(b.px) AS band_avg
FROM ticks a
JOIN ticks b ON a.sym = b.sym AND b.ts BETWEEN a.ts - INTERVAL 30 SECONDS AND a.ts
GROUP BY a.sym, a.ts, a.px, a.qty

-- name: selfjoin_login_then_purchase
SELECT a.user_id, a.ts AS login_ts, count(b.id) AS purchases_within_day
FROM events a
JOIN events b
  ON a.user_id = b.user_id AND b.kind = 'purchase'
 AND b.ts > a.ts AND b.ts <= a.ts + INTERVAL 1 DAY
WHERE a.kind = 'login'
GROUP BY a.user_id, a.ts, a.id

-- name: selfjoin_cheaper_in_category
SELECT a.product_id, a.category, a.price, count(b.product_id) AS n_cheaper
FROM products a
LEFT JOIN products b ON a.category = b.category AND b.price < a.price
GROUP BY a.product_id, a.category, a.price

-- name: selfjoin_duplicate_events
SELECT a.id, count(*) AS copies_squared
FROM events a JOIN events b ON a.id = b.id
GROUP BY a.id
HAVING count(*) > 1

-- name: selfjoin_ticks_same_instant_pairs
SELECT a.sym AS s1, b.sym AS s2, count(*) AS n_same_ts
FROM ticks a JOIN ticks b ON a.ts = b.ts AND a.sym < b.sym
GROUP BY a.sym, b.sym

-- name: selfjoin_earlier_signups_same_country
SELECT a.customer_id, count(b.customer_id) AS n_earlier
FROM customers a
LEFT JOIN customers b ON a.country = b.country AND b.signup < a.signup
GROUP BY a.customer_id

-- ===================================================================== window functions

-- name: win_row_number_per_customer
SELECT order_id, customer_id,
       row_number() OVER (PARTITION BY customer_id ORDER BY order_ts, order_id) AS rn
FROM orders

-- name: win_rank_with_ties
SELECT order_id, status, amount,
       rank() OVER (PARTITION BY status ORDER BY amount DESC) AS rnk
FROM orders

-- name: win_dense_rank_signup
SELECT customer_id, country, signup,
       dense_rank() OVER (PARTITION BY country ORDER BY signup NULLS LAST) AS drnk
FROM customers

-- name: win_lag_lead
SELECT sym, ts, px,
       lag(px) OVER (PARTITION BY sym ORDER BY ts, px, qty) AS prev_px,
       lead(px, 2, 0.0) OVER (PARTITION BY sym ORDER BY ts, px, qty) AS px_2_ahead
FROM ticks

-- name: win_running_sum_rows
SELECT sym, ts, qty,
       sum(qty) OVER (PARTITION BY sym ORDER BY ts, px, qty
                      ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS cum_qty
FROM ticks

-- name: win_moving_avg_rows
SELECT sym, ts, px,
       avg(px) OVER (PARTITION BY sym ORDER BY ts, px, qty
                     ROWS BETWEEN 4 PRECEDING AND CURRENT ROW) AS ma5
FROM ticks

-- name: win_range_running_sum_ties
-- RANGE includes all peers, so tied amounts get the same running total
SELECT order_id, status, amount,
       sum(amount) OVER (PARTITION BY status ORDER BY amount
                         RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS running
FROM orders

-- name: win_range_numeric_offset
SELECT order_id, amount,
       count(*) OVER (ORDER BY amount RANGE BETWEEN 25 PRECEDING AND 25 FOLLOWING) AS near
FROM orders

-- name: win_range_interval_offset
SELECT sym, ts, qty,
       sum(qty) OVER (PARTITION BY sym ORDER BY ts
                      RANGE BETWEEN INTERVAL 1 MINUTE PRECEDING AND CURRENT ROW) AS qty_1m
FROM ticks

-- name: win_ntile
SELECT order_id, amount, ntile(4) OVER (ORDER BY amount, order_id) AS quartile
FROM orders

-- name: win_first_last_value_full_frame
SELECT sym, ts, px,
       first_value(px) OVER w AS open_px,
       last_value(px) OVER w AS close_px
FROM ticks
WINDOW w AS (PARTITION BY sym ORDER BY ts, px, qty
             ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)

-- name: win_last_value_ignore_nulls
SELECT sym, ts, qty,
       last_value(qty) IGNORE NULLS OVER (PARTITION BY sym ORDER BY ts, px, qty
                                          ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
         AS last_known_qty
FROM ticks

-- name: win_percent_rank_cume_dist
SELECT product_id, category, price,
       percent_rank() OVER (PARTITION BY category ORDER BY price) AS pr,
       cume_dist() OVER (PARTITION BY category ORDER BY price) AS cd
FROM products

-- name: win_share_of_customer_total
SELECT order_id, customer_id, amount,
       amount / sum(amount) OVER (PARTITION BY customer_id) AS share
FROM orders

-- name: win_nth_value
SELECT sym, ts,
       nth_value(px, 3) OVER (PARTITION BY sym ORDER BY ts, px, qty
                              ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS third_px
FROM ticks

-- name: win_gap_seconds
SELECT id, user_id, ts,
       unix_timestamp(ts) - unix_timestamp(lag(ts) OVER (PARTITION BY user_id ORDER BY ts, id))
         AS gap_s
FROM events

-- name: win_rank_over_aggregate
SELECT customer_id, sum(amount) AS total,
       rank() OVER (ORDER BY sum(amount) DESC NULLS LAST) AS rnk
FROM orders
GROUP BY customer_id

-- name: win_sessionization
WITH flagged AS (
  SELECT user_id, ts, id,
         CASE WHEN lag(ts) OVER (PARTITION BY user_id ORDER BY ts, id) IS NULL
                OR ts > lag(ts) OVER (PARTITION BY user_id ORDER BY ts, id) + INTERVAL 6 HOURS
              THEN 1 ELSE 0 END AS is_new
  FROM events WHERE user_id IS NOT NULL
)
SELECT user_id, ts, id,
       sum(is_new) OVER (PARTITION BY user_id ORDER BY ts, id
                         ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS session_no
FROM flagged

-- name: win_running_vwap
SELECT sym, ts, px, qty,
       sum(px * qty) OVER w / sum(qty) OVER w AS vwap
FROM ticks
WINDOW w AS (PARTITION BY sym ORDER BY ts, px, qty ROWS UNBOUNDED PRECEDING)

-- name: win_max_following
SELECT sym, ts, px,
       max(px) OVER (PARTITION BY sym ORDER BY ts, px, qty
                     ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) AS future_max
FROM ticks

-- name: win_count_distinct_via_collect_set
SELECT id, user_id, size(collect_set(kind) OVER (PARTITION BY user_id)) AS n_kinds
FROM events

-- name: win_row_number_global
SELECT product_id, row_number() OVER (ORDER BY price DESC NULLS LAST, product_id) AS rn
FROM products

-- name: win_lead_with_default_and_offset
SELECT order_id, customer_id,
       lead(order_id, 1, -1) OVER (PARTITION BY customer_id ORDER BY order_id) AS next_id,
       lag(amount, 2) OVER (PARTITION BY customer_id ORDER BY order_id) AS amount_2_back
FROM orders

-- name: win_min_max_partition_no_order
SELECT sym, ts, px,
       px - min(px) OVER (PARTITION BY sym) AS above_low,
       max(px) OVER (PARTITION BY sym) - px AS below_high
FROM ticks

-- ===================================================================== grouping sets / rollup / cube

-- name: grp_rollup_country_status
SELECT c.country, o.status, sum(o.amount) AS total,
       grouping(c.country) AS g_country, grouping(o.status) AS g_status
FROM orders o JOIN customers c ON o.customer_id = c.customer_id
GROUP BY ROLLUP(c.country, o.status)

-- name: grp_cube_status_month
SELECT status, date_trunc('MONTH', order_ts) AS month, count(*) AS n, grouping_id() AS gid
FROM orders
GROUP BY CUBE(status, date_trunc('MONTH', order_ts))

-- name: grp_grouping_sets_explicit
SELECT sym, hour(ts) AS hr, sum(qty) AS qty, grouping(sym) AS gs, grouping(hour(ts)) AS gh
FROM ticks
GROUP BY GROUPING SETS ((sym), (sym, hour(ts)), ())

-- name: grp_with_rollup_suffix
SELECT country, year(signup) AS yr, count(*) AS n
FROM customers
GROUP BY country, year(signup) WITH ROLLUP

-- name: grp_with_cube_suffix
SELECT kind, device.os AS os, count(*) AS n
FROM events
GROUP BY kind, device.os WITH CUBE

-- name: grp_mixed_column_and_rollup
SELECT status, customer_id % 3 AS bucket, count(*) AS n
FROM orders
GROUP BY status, ROLLUP(customer_id % 3)

-- name: grp_grouping_id_filter
SELECT category, in_stock, count(*) AS n, grouping_id(category, in_stock) AS gid
FROM products
GROUP BY CUBE(category, in_stock)
HAVING grouping_id(category, in_stock) IN (1, 3)

-- name: grp_grouping_sets_label
SELECT CASE WHEN grouping(country) = 1 THEN 'ALL' ELSE coalesce(country, '(null)') END AS country,
       count(*) AS n
FROM customers
GROUP BY GROUPING SETS (country, ())

-- name: grp_group_by_ordinal
SELECT status, year(order_ts) AS yr, count(*) AS n
FROM orders
GROUP BY 1, 2

-- name: grp_group_by_all
SELECT status, customer_id IS NULL AS anonymous, count(*) AS n, sum(amount) AS total
FROM orders
GROUP BY ALL

-- name: grp_basic_aggregates
SELECT status, count(*) AS n, count(amount) AS n_amount, count(DISTINCT customer_id) AS n_cust,
       sum(amount) AS total, avg(amount) AS mean, min(amount) AS lo, max(amount) AS hi,
       stddev_samp(amount) AS sd, var_pop(amount) AS vp
FROM orders
GROUP BY status

-- name: grp_filter_clause
SELECT customer_id,
       count(*) FILTER (WHERE status = 'paid') AS n_paid,
       sum(amount) FILTER (WHERE status IN ('paid', 'shipped')) AS settled
FROM orders
GROUP BY customer_id

-- name: grp_count_if_bool_aggs
SELECT kind, count_if(value > 50) AS n_big, bool_and(value >= 0) AS all_non_neg,
       bool_or(value < 0) AS any_neg, every(user_id IS NOT NULL) AS all_known
FROM events
GROUP BY kind

-- name: grp_sorted_collections
SELECT customer_id, sort_array(collect_set(status)) AS statuses,
       array_sort(collect_list(order_id)) AS order_ids
FROM orders
GROUP BY customer_id

-- name: grp_max_by_min_by
SELECT customer_id, max_by(amount, order_id) AS last_amount, min_by(status, order_id) AS first_status
FROM orders
GROUP BY customer_id

-- name: grp_percentiles
SELECT status, percentile(amount, 0.5) AS p50, percentile(amount, array(0.25, 0.75)) AS iqr,
       median(amount) AS med,
       percentile_cont(0.9) WITHIN GROUP (ORDER BY amount) AS p90c,
       percentile_disc(0.9) WITHIN GROUP (ORDER BY amount) AS p90d
FROM orders
GROUP BY status

-- name: grp_percentile_with_frequency
SELECT status, percentile(amount, 0.5, customer_id) AS p50w,
       percentile(amount, array(0.25, 0.75), customer_id % 3 + 1) AS iqrw
FROM orders
GROUP BY status

-- name: grp_listagg_ordered
SELECT customer_id,
       listagg(CAST(order_id AS STRING), ',') WITHIN GROUP (ORDER BY order_id) AS ids
FROM orders
GROUP BY customer_id

-- name: grp_decimal_aggregates
SELECT category, sum(price) AS total, avg(price) AS mean, max(price) AS hi, count(price) AS n
FROM products
GROUP BY category

-- ===================================================================== having

-- name: having_sum_threshold
SELECT customer_id, sum(amount) AS total
FROM orders GROUP BY customer_id
HAVING sum(amount) > 1500

-- name: having_count_distinct
SELECT user_id, count(DISTINCT kind) AS n_kinds
FROM events GROUP BY user_id
HAVING count(DISTINCT kind) >= 4

-- name: having_select_alias
SELECT customer_id, count(*) AS n
FROM orders GROUP BY customer_id
HAVING n > 5

-- name: having_without_group_by
SELECT sum(amount) AS total FROM orders HAVING sum(amount) > 0

-- name: having_scalar_subquery
SELECT status, avg(amount) AS mean
FROM orders GROUP BY status
HAVING avg(amount) > (SELECT avg(amount) FROM orders)

-- name: having_range_of_prices
SELECT sym, max(px) - min(px) AS rng
FROM ticks GROUP BY sym
HAVING max(px) - min(px) > 3

-- name: having_bool_or
SELECT customer_id, count(*) AS n
FROM orders GROUP BY customer_id
HAVING bool_or(status = 'cancelled') AND NOT bool_or(status = 'returned')

-- name: having_filter_aggregate
SELECT user_id, count(*) AS n
FROM events GROUP BY user_id
HAVING count(*) FILTER (WHERE kind = 'click') >= 2

-- name: having_aggregate_not_selected
SELECT customer_id
FROM orders GROUP BY customer_id
HAVING max(order_ts) < TIMESTAMP '2024-03-01 00:00:00'

-- name: having_with_order_by
SELECT country, count(*) AS n
FROM customers GROUP BY country
HAVING count(*) >= 5
ORDER BY n DESC, country NULLS LAST

-- ===================================================================== CTEs

-- name: cte_simple
WITH big AS (SELECT * FROM orders WHERE amount > 400)
SELECT status, count(*) AS n FROM big GROUP BY status

-- name: cte_multiple
WITH per_customer AS (
  SELECT customer_id, sum(amount) AS total FROM orders GROUP BY customer_id
), ranked AS (
  SELECT customer_id, total, dense_rank() OVER (ORDER BY total DESC NULLS LAST) AS r
  FROM per_customer
)
SELECT r.customer_id, c.name, r.total
FROM ranked r JOIN customers c ON r.customer_id = c.customer_id
WHERE r.r <= 5

-- name: cte_nested_with
WITH outer_cte AS (
  WITH inner_cte AS (SELECT sym, px FROM ticks WHERE qty IS NOT NULL)
  SELECT sym, avg(px) AS mean FROM inner_cte GROUP BY sym
)
SELECT sym, mean FROM outer_cte WHERE mean > 0

-- name: cte_referenced_twice
WITH daily AS (
  SELECT to_date(order_ts) AS d, sum(amount) AS total FROM orders GROUP BY to_date(order_ts)
)
SELECT a.d, a.total, b.total AS prev_total
FROM daily a LEFT JOIN daily b ON b.d = date_sub(a.d, 1)

-- name: cte_chain_three_steps
WITH e AS (SELECT user_id, kind FROM events WHERE user_id IS NOT NULL),
     k AS (SELECT user_id, count(*) AS n FROM e WHERE kind = 'view' GROUP BY user_id),
     j AS (SELECT c.country, k.n FROM k JOIN customers c ON c.customer_id = k.user_id)
SELECT country, sum(n) AS views FROM j GROUP BY country

-- name: cte_column_aliases
WITH t(sym, n, hi) AS (SELECT sym, count(*), max(px) FROM ticks GROUP BY sym)
SELECT sym, n, hi FROM t

-- name: cte_in_subquery
SELECT * FROM (
  WITH x AS (SELECT category, count(*) AS n FROM products GROUP BY category)
  SELECT category, n FROM x WHERE n > 5
) sub

-- name: cte_recursive
WITH RECURSIVE r(n, fact) AS (
  SELECT 1, CAST(1 AS BIGINT)
  UNION ALL
  SELECT n + 1, fact * (n + 1) FROM r WHERE n < 12
)
SELECT n, fact FROM r

-- name: cte_union_inside
WITH ids AS (
  SELECT customer_id AS id FROM orders
  UNION
  SELECT user_id AS id FROM events
)
SELECT count(*) AS n, count(id) AS n_non_null FROM ids

-- name: cte_with_window_and_filter
WITH ranked AS (
  SELECT sym, ts, px, row_number() OVER (PARTITION BY sym ORDER BY px DESC, ts, qty) AS rn
  FROM ticks
)
SELECT sym, ts, px FROM ranked WHERE rn <= 3

-- name: cte_used_in_scalar_subquery
WITH stats AS (SELECT avg(amount) AS mean FROM orders)
SELECT order_id, amount FROM orders WHERE amount > (SELECT mean FROM stats) * 1.5

-- ===================================================================== subqueries

-- name: subq_scalar_uncorrelated
SELECT order_id, amount - (SELECT avg(amount) FROM orders) AS delta FROM orders

-- name: subq_scalar_correlated_select
SELECT c.customer_id,
       (SELECT max(o.amount) FROM orders o WHERE o.customer_id = c.customer_id) AS max_amount
FROM customers c

-- name: subq_in
SELECT order_id FROM orders
WHERE customer_id IN (SELECT customer_id FROM customers WHERE country = 'DE')

-- name: subq_not_in_with_nulls
-- events.user_id contains NULL, so NOT IN is never true: empty result
SELECT order_id FROM orders WHERE customer_id NOT IN (SELECT user_id FROM events)

-- name: subq_not_in_null_free
SELECT customer_id, name FROM customers
WHERE customer_id NOT IN (SELECT customer_id FROM orders WHERE customer_id IS NOT NULL)

-- name: subq_exists_correlated
SELECT c.customer_id FROM customers c
WHERE EXISTS (SELECT 1 FROM events e WHERE e.user_id = c.customer_id AND e.kind = 'purchase')

-- name: subq_not_exists
-- products never sold in a paid order
SELECT p.sku FROM products p
WHERE NOT EXISTS (SELECT 1 FROM orders o
                  WHERE o.status = 'paid' AND array_contains(o.items, p.sku))

-- name: subq_in_multi_column
SELECT order_id FROM orders
WHERE (customer_id, status) IN (SELECT customer_id, 'paid' FROM customers WHERE country = 'US')

-- name: subq_correlated_avg_filter
SELECT o.order_id, o.status, o.amount FROM orders o
WHERE o.amount > (SELECT avg(o2.amount) FROM orders o2 WHERE o2.status = o.status)

-- name: subq_lateral_correlated
SELECT c.customer_id, t.n, t.total
FROM customers c,
LATERAL (SELECT count(*) AS n, sum(o.amount) AS total FROM orders o
         WHERE o.customer_id = c.customer_id) t

-- name: subq_exists_in_select
SELECT c.customer_id,
       EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.customer_id) AS has_orders
FROM customers c

-- name: subq_in_in_select
SELECT p.sku, p.sku IN (SELECT explode(items) FROM orders) AS ever_ordered FROM products p

-- name: subq_derived_table_join
SELECT t.status, t.n, t.n * 1.0 / s.total AS frac
FROM (SELECT status, count(*) AS n FROM orders GROUP BY status) t
CROSS JOIN (SELECT count(*) AS total FROM orders) s

-- name: subq_scalar_in_case
SELECT sym, ts,
       CASE WHEN px > (SELECT avg(px) FROM ticks t2 WHERE t2.sym = t.sym) THEN 'above'
            ELSE 'below' END AS side
FROM ticks t

-- ===================================================================== set operations

-- name: setop_union_distinct
SELECT customer_id AS id FROM orders
UNION
SELECT user_id FROM events

-- name: setop_union_all
SELECT 'order' AS src, customer_id AS id FROM orders WHERE amount > 450
UNION ALL
SELECT 'event', user_id FROM events WHERE value > 95

-- name: setop_intersect
SELECT customer_id FROM orders INTERSECT SELECT user_id FROM events

-- name: setop_intersect_all
SELECT status FROM orders WHERE amount > 250
INTERSECT ALL
SELECT status FROM orders WHERE amount < 350

-- name: setop_except
SELECT customer_id FROM customers EXCEPT SELECT customer_id FROM orders

-- name: setop_except_all
SELECT kind FROM events EXCEPT ALL SELECT kind FROM events WHERE value > 50

-- name: setop_minus
SELECT sym FROM ticks MINUS SELECT 'AAPL'

-- name: setop_nested_parentheses
(SELECT customer_id FROM customers WHERE country = 'US'
 UNION
 SELECT customer_id FROM customers WHERE country = 'DE')
EXCEPT
(SELECT customer_id FROM orders WHERE status = 'cancelled')

-- name: setop_union_order_limit
SELECT name AS label FROM customers WHERE name IS NOT NULL
UNION ALL
SELECT name FROM products
ORDER BY label
LIMIT 12

-- name: setop_union_type_widening
SELECT 1 AS x UNION ALL SELECT 2.5 UNION ALL SELECT CAST(3 AS BIGINT)

-- name: setop_union_nulls_dedup
SELECT country FROM customers UNION SELECT CAST(NULL AS STRING)

-- name: setop_union_in_subquery_aggregate
SELECT src, count(*) AS n FROM (
  SELECT 'orders' AS src, order_ts AS ts FROM orders
  UNION ALL
  SELECT 'events', ts FROM events
) u
WHERE ts >= TIMESTAMP '2024-01-05 00:00:00'
GROUP BY src

-- ===================================================================== higher-order functions

-- name: hof_transform
SELECT order_id, transform(items, x -> lower(x)) AS lowered FROM orders

-- name: hof_transform_with_index
SELECT order_id, transform(items, (x, i) -> concat(CAST(i AS STRING), ':', x)) AS numbered
FROM orders

-- name: hof_filter
SELECT order_id, filter(items, x -> x IS NOT NULL AND x > 'P020') AS high_skus FROM orders

-- name: hof_aggregate_sum
-- NULL elements are filtered out first, otherwise the sum would be NULL
SELECT order_id,
       aggregate(filter(items, x -> x IS NOT NULL), 0,
                 (acc, x) -> acc + CAST(substr(x, 2) AS INT)) AS sku_sum
FROM orders

-- name: hof_aggregate_with_finish
SELECT order_id,
       aggregate(items, CAST(0 AS BIGINT), (acc, x) -> acc + length(x), acc -> acc * 10) AS chars10
FROM orders

-- name: hof_reduce
SELECT reduce(array(1, 2, 3, 4), 0, (a, x) -> a + x * x) AS sumsq

-- name: hof_exists_forall
SELECT order_id, exists(items, x -> x = 'P001') AS has_p001,
       forall(items, x -> x LIKE 'P0%') AS all_p0
FROM orders

-- name: hof_zip_with
SELECT order_id,
       zip_with(items, transform(items, x -> length(x)), (a, b) -> concat(a, '#', CAST(b AS STRING))) AS z
FROM orders

-- name: hof_array_sort_comparator
SELECT order_id,
       array_sort(items, (l, r) -> CASE WHEN l IS NULL AND r IS NULL THEN 0
                                        WHEN l IS NULL THEN 1
                                        WHEN r IS NULL THEN -1
                                        WHEN l < r THEN 1
                                        WHEN l > r THEN -1
                                        ELSE 0 END) AS desc_items
FROM orders

-- name: hof_map_filter
SELECT id, map_filter(tags, (k, v) -> v >= 2) AS strong FROM events

-- name: hof_transform_values_keys
SELECT id, transform_values(tags, (k, v) -> v * 10) AS scaled,
       transform_keys(tags, (k, v) -> upper(k)) AS upper_keys
FROM events

-- name: hof_map_zip_with
SELECT id, map_zip_with(tags, map('a', 100, 'z', 1), (k, v1, v2) -> coalesce(v1, 0) + coalesce(v2, 0)) AS merged
FROM events

-- name: hof_nested_lambda
SELECT transform(sequence(1, 3), i -> transform(sequence(1, i), j -> i * j)) AS tri

-- name: hof_filter_on_collected
SELECT customer_id,
       filter(array_sort(collect_list(amount)), a -> a > 200) AS big_amounts
FROM orders GROUP BY customer_id

-- ===================================================================== date / time

-- name: dt_date_trunc_units
SELECT order_id, date_trunc('HOUR', order_ts) AS h, date_trunc('DAY', order_ts) AS d,
       date_trunc('WEEK', order_ts) AS w, date_trunc('MONTH', order_ts) AS m,
       date_trunc('QUARTER', order_ts) AS q
FROM orders

-- name: dt_date_add_sub
SELECT customer_id, signup, date_add(signup, 30) AS plus30, date_sub(signup, 7) AS minus7,
       add_months(signup, 1) AS next_month, signup + 1 AS next_day
FROM customers

-- name: dt_datediff
SELECT customer_id, datediff(to_date(last_login), signup) AS days_active,
       date_diff(DATE '2024-12-31', signup) AS days_to_eoy
FROM customers

-- name: dt_window_tumbling
SELECT window(ts, '10 minutes').start AS wstart, window(ts, '10 minutes').end AS wend,
       sym, count(*) AS n, sum(qty) AS qty
FROM ticks
GROUP BY window(ts, '10 minutes'), sym

-- name: dt_window_sliding
SELECT w.start, w.end, count(*) AS n
FROM (SELECT window(ts, '6 hours', '2 hours') AS w FROM events)
GROUP BY w

-- name: dt_window_struct_alias
SELECT win.start, win.end, kind, n FROM (
  SELECT window(ts, '1 day') AS win, kind, count(*) AS n
  FROM events GROUP BY window(ts, '1 day'), kind
)

-- name: dt_session_window
SELECT user_id, session_window(ts, '2 hours') AS sess, count(*) AS n
FROM events WHERE user_id IS NOT NULL
GROUP BY user_id, session_window(ts, '2 hours')

-- name: dt_unix_time_roundtrip
SELECT order_id, unix_timestamp(order_ts) AS epoch,
       from_unixtime(unix_timestamp(order_ts)) AS back_default,
       from_unixtime(unix_timestamp(order_ts), 'yyyy/MM/dd HH:mm') AS back_fmt
FROM orders

-- name: dt_unix_timestamp_parse
SELECT unix_timestamp('2024-02-29 12:00:00') AS a,
       unix_timestamp('29.02.2024', 'dd.MM.yyyy') AS b,
       to_unix_timestamp('2024-01-01', 'yyyy-MM-dd') AS c

-- name: dt_make_timestamp_make_date
SELECT make_timestamp(2024, 2, 29, 13, 45, 30.5) AS ts,
       make_date(2023, 12, 31) AS d,
       make_timestamp(year(signup), month(signup), 1, 0, 0, 0) AS month_start
FROM customers WHERE signup IS NOT NULL

-- name: dt_extract_and_date_part
SELECT order_id, EXTRACT(YEAR FROM order_ts) AS y, EXTRACT(MONTH FROM order_ts) AS m,
       EXTRACT(DAYOFWEEK FROM order_ts) AS dow, EXTRACT(HOUR FROM order_ts) AS h,
       date_part('MINUTE', order_ts) AS mi, EXTRACT(SECOND FROM order_ts) AS s
FROM orders

-- name: dt_date_format
SELECT order_id, date_format(order_ts, 'yyyy-MM-dd') AS d,
       date_format(order_ts, 'EEE, d MMM yyyy HH:mm:ss') AS pretty,
       date_format(order_ts, 'D') AS day_of_year, date_format(order_ts, 'hh:mm a') AS ampm
FROM orders

-- name: dt_months_between
SELECT customer_id, months_between(last_login, signup) AS m,
       months_between(TIMESTAMP '2024-03-31 00:00:00', signup, false) AS m_unrounded
FROM customers

-- name: dt_interval_arithmetic
SELECT order_id, order_ts + INTERVAL 2 HOURS AS plus2h,
       order_ts - INTERVAL '1' DAY AS minus1d,
       order_ts + INTERVAL '1 12:30:00' DAY TO SECOND AS plus_dts
FROM orders

-- name: dt_parse_strings
SELECT to_date('2024-03-15') AS d, to_date('15/03/2024', 'dd/MM/yyyy') AS d2,
       to_timestamp('2024-03-15 08:09:10') AS t, to_timestamp('20240315 0809', 'yyyyMMdd HHmm') AS t2,
       CAST('2024-03-15T08:09:10Z' AS TIMESTAMP) AS t3

-- name: dt_calendar_parts
SELECT customer_id, dayofweek(signup) AS dow, weekofyear(signup) AS woy, quarter(signup) AS q,
       dayofyear(signup) AS doy, last_day(signup) AS eom, next_day(signup, 'MON') AS next_mon,
       trunc(signup, 'MM') AS first_of_month
FROM customers

-- name: dt_timestampdiff_timestampadd
SELECT id, timestampdiff(HOUR, TIMESTAMP '2024-01-01 00:00:00', ts) AS hours_in,
       timestampadd(MINUTE, 90, ts) AS plus90
FROM events

-- name: dt_seconds_conversions
SELECT unix_seconds(ts) AS s, timestamp_seconds(unix_seconds(ts) + 60) AS plus_min,
       unix_millis(ts) AS ms, unix_date(to_date(ts)) AS days
FROM events

-- name: dt_timezone_conversion
SELECT order_id, from_utc_timestamp(order_ts, 'America/New_York') AS ny,
       to_utc_timestamp(order_ts, 'Asia/Tokyo') AS from_tokyo
FROM orders

-- name: dt_timestamp_compare_literals
SELECT count(*) AS n FROM events
WHERE ts BETWEEN TIMESTAMP '2024-01-03 00:00:00' AND TIMESTAMP '2024-01-05 23:59:59'
  AND to_date(ts) <> DATE '2024-01-04'

-- name: dt_hourly_histogram
SELECT hour(ts) AS hr, minute(ts) DIV 15 AS quarter_hour, count(*) AS n
FROM ticks GROUP BY hour(ts), minute(ts) DIV 15

-- ===================================================================== pivot / unpivot

-- name: pivot_status_amount
SELECT * FROM (SELECT customer_id, status, amount FROM orders)
PIVOT (sum(amount) FOR status IN ('paid', 'shipped', 'new', 'cancelled', 'returned'))

-- name: pivot_multiple_aggregates_aliases
SELECT * FROM (SELECT customer_id, status, amount FROM orders)
PIVOT (sum(amount) AS total, count(amount) AS n FOR status IN ('paid' AS paid, 'new' AS fresh))

-- name: pivot_events_kind_counts
SELECT * FROM (SELECT user_id, kind, id FROM events)
PIVOT (count(id) FOR kind IN ('click', 'view', 'purchase'))

-- name: pivot_multi_column_values
SELECT * FROM (SELECT sym, hour(ts) AS hr, minute(ts) < 30 AS first_half, qty FROM ticks)
PIVOT (sum(qty) FOR (hr, first_half) IN ((9, false) AS h9b, (10, true) AS h10a, (10, false) AS h10b))

-- name: pivot_ticks_avg_px
SELECT * FROM (SELECT hour(ts) AS hr, sym, px FROM ticks)
PIVOT (avg(px) FOR sym IN ('AAPL' AS aapl, 'MSFT' AS msft, 'GOOG' AS goog, 'AMZN' AS amzn))

-- name: pivot_then_filter
SELECT customer_id, paid, shipped FROM (
  SELECT * FROM (SELECT customer_id, status, order_id FROM orders)
  PIVOT (count(order_id) FOR status IN ('paid', 'shipped'))
) WHERE paid > 1

-- name: unpivot_basic
SELECT * FROM (SELECT sym, min(px) AS lo, max(px) AS hi, avg(px) AS mean FROM ticks GROUP BY sym)
UNPIVOT (val FOR stat IN (lo, hi, mean))

-- name: unpivot_include_nulls
SELECT * FROM (SELECT product_id, CAST(price AS DOUBLE) AS price, weight FROM products)
UNPIVOT INCLUDE NULLS (v FOR attr IN (price, weight))

-- name: unpivot_exclude_nulls_alias
SELECT * FROM (SELECT customer_id, name, country FROM customers)
UNPIVOT EXCLUDE NULLS (txt FOR field IN (name AS n, country AS c))

-- name: unpivot_multi_value_columns
SELECT * FROM (
  SELECT sym, min(px) AS lo_px, min(qty) AS lo_qty, max(px) AS hi_px, max(qty) AS hi_qty
  FROM ticks GROUP BY sym
)
UNPIVOT ((px, qty) FOR bound IN ((lo_px, lo_qty) AS low, (hi_px, hi_qty) AS high))

-- ===================================================================== lateral view / generators

-- name: lateral_explode_items
SELECT o.order_id, item FROM orders o LATERAL VIEW explode(items) t AS item

-- name: lateral_explode_outer
-- keeps orders whose items array is empty or NULL (item is NULL then)
SELECT order_id, item FROM orders LATERAL VIEW OUTER explode(items) t AS item

-- name: lateral_posexplode
SELECT order_id, pos, item FROM orders LATERAL VIEW posexplode(items) t AS pos, item

-- name: lateral_posexplode_outer
SELECT order_id, pos, item FROM orders LATERAL VIEW OUTER posexplode(items) t AS pos, item
WHERE items IS NULL OR size(items) = 0

-- name: lateral_explode_map
SELECT id, k, v FROM events LATERAL VIEW explode(tags) t AS k, v

-- name: lateral_two_views
SELECT order_id, item, n
FROM orders
LATERAL VIEW explode(items) a AS item
LATERAL VIEW explode(sequence(1, 2)) b AS n
WHERE order_id < 20

-- name: lateral_inline_structs
SELECT id, name, val
FROM (SELECT 1 AS id, array(named_struct('name', 'a', 'val', 1), named_struct('name', 'b', 'val', 2)) AS arr)
LATERAL VIEW inline(arr) t AS name, val

-- name: lateral_explode_split_names
SELECT customer_id, part FROM customers LATERAL VIEW explode(split(name, ' ')) t AS part

-- name: lateral_explode_in_select_list
SELECT order_id, explode(items) AS item FROM orders WHERE amount > 300

-- name: lateral_stack_generator
SELECT sym, metric, val
FROM (SELECT sym, min(px) AS lo, max(px) AS hi FROM ticks GROUP BY sym)
LATERAL VIEW stack(2, 'lo', lo, 'hi', hi) s AS metric, val

-- name: lateral_table_valued_functions
SELECT r.id, e.col AS x FROM range(3) r, explode(array(10, 20)) e

-- name: lateral_explode_aggregate_back
SELECT item, count(DISTINCT order_id) AS n_orders
FROM orders LATERAL VIEW explode(items) t AS item
GROUP BY item

-- ===================================================================== string functions

-- name: str_regexp_extract
SELECT customer_id, regexp_extract(name, '^(\\w+) (\\w+)$', 1) AS first,
       regexp_extract(name, '^(\\w+) (\\w+)$', 2) AS last
FROM customers

-- name: str_regexp_replace_and_like
SELECT sku, regexp_replace(sku, '[0-9]', '#') AS masked, sku RLIKE 'P0[0-1][0-9]' AS low,
       name LIKE 'B%' AS starts_b, name ILIKE '%RAKE' AS rake
FROM products

-- name: str_split_and_index
SELECT customer_id, split(name, ' ') AS parts, split(name, ' ')[0] AS first,
       split_part(name, ' ', 2) AS last, size(split(name, ' ')) AS n
FROM customers WHERE name IS NOT NULL

-- name: str_concat_ws
SELECT customer_id, concat_ws('|', name, country, CAST(signup AS STRING)) AS joined,
       concat_ws(',', array('x', NULL, 'y')) AS skip_nulls
FROM customers

-- name: str_format_string
SELECT order_id, format_string('%05d|%-10s|%.2f', order_id, status, amount) AS f,
       printf('%s-%s', customer_id, status) AS p
FROM orders

-- name: str_case_and_padding
SELECT sku, upper(name) AS u, lower(name) AS l, initcap(lower(name)) AS i,
       lpad(CAST(product_id AS STRING), 5, '0') AS padded, rpad(sku, 8, '.') AS rp
FROM products

-- name: str_substring_family
SELECT name, substring(name, 1, 3) AS s1, substr(name, -4) AS s2, left(name, 2) AS l2,
       right(name, 3) AS r3, substring(name FROM 2 FOR 3) AS s3
FROM products

-- name: str_search_functions
SELECT name, instr(name, 'a') AS i, locate('e', name) AS loc, position('e' IN name) AS pos,
       contains(name, 'Kite') AS c, startswith(name, 'Big') AS sw, endswith(name, 'Saw') AS ew
FROM products

-- name: str_trim_replace_translate
SELECT trim('  x  ') AS t, ltrim('  x') AS lt, rtrim('x  ') AS rt,
       trim(BOTH 'x' FROM 'xxhixx') AS tb, trim(LEADING 'x' FROM 'xxhi') AS tl,
       replace('a-b-c', '-', '+') AS r, translate('abc', 'ab', 'xy') AS tr

-- name: str_concat_operator_and_lengths
SELECT sku || ':' || coalesce(category, '?') AS label, length(name) AS len,
       char_length(name) AS cl, octet_length(name) AS ol, repeat('ab', 2) AS rep,
       reverse(sku) AS rev
FROM products

-- name: str_like_any_all
SELECT name FROM customers
WHERE name LIKE ANY ('Ana%', 'Ben%') AND name NOT LIKE ALL ('%Kim', '%Sato')

-- name: str_regexp_extract_all_and_hashes
SELECT sku, regexp_extract_all(name, '([aeiou])', 1) AS vowels, md5(sku) AS m,
       sha2(sku, 256) AS s, crc32(sku) AS c, hex(sku) AS h
FROM products

-- name: str_format_number_and_conversions
SELECT format_number(amount, 2) AS fmt, CAST(amount AS STRING) AS s,
       CAST(CAST(order_id AS STRING) AS INT) + 1 AS back, ascii(status) AS a, chr(65) AS ch
FROM orders WHERE amount IS NOT NULL

-- name: str_group_concat_sorted
SELECT country, array_join(sort_array(collect_set(split_part(name, ' ', 1))), ', ') AS first_names
FROM customers GROUP BY country

-- ===================================================================== conditionals

-- name: cond_case_searched
SELECT order_id,
       CASE WHEN amount IS NULL THEN 'unknown'
            WHEN amount < 100 THEN 'small'
            WHEN amount < 300 THEN 'medium'
            ELSE 'large' END AS size_class
FROM orders

-- name: cond_case_simple
SELECT order_id,
       CASE status WHEN 'paid' THEN 1 WHEN 'shipped' THEN 2 WHEN 'new' THEN 0 ELSE -1 END AS code
FROM orders

-- name: cond_if_function
SELECT id, if(value > 50, 'hi', 'lo') AS band, if(kind IS NULL, 'n/a', kind) AS k FROM events

-- name: cond_coalesce_nvl_family
SELECT customer_id, coalesce(name, country, 'anon') AS label, nvl(country, '??') AS c,
       nvl2(signup, 'has signup', 'no signup') AS s, ifnull(name, '-') AS n
FROM customers

-- name: cond_nullif_and_division
SELECT status, sum(amount) / nullif(count(amount), 0) AS mean,
       try_divide(sum(amount), count(*) - count(*)) AS div_by_zero
FROM orders GROUP BY status

-- name: cond_case_in_aggregate
SELECT customer_id,
       sum(CASE WHEN status = 'paid' THEN amount ELSE 0 END) AS paid_total,
       count(CASE WHEN status = 'cancelled' THEN 1 END) AS n_cancelled
FROM orders GROUP BY customer_id

-- name: cond_greatest_least
SELECT order_id, greatest(amount, 100.0) AS at_least_100, least(amount, 200.0) AS at_most_200,
       greatest(1, NULL, 3) AS g
FROM orders

-- name: cond_null_semantics
SELECT NULL = NULL AS eq, NULL <=> NULL AS nseq, NULL IS DISTINCT FROM 1 AS dist,
       1 IS NOT DISTINCT FROM 1 AS not_dist, CASE WHEN CAST(NULL AS BOOLEAN) THEN 'y' ELSE 'n' END AS c,
       NULL AND false AS a, NULL OR true AS o

-- name: cond_decode_and_zeroifnull
SELECT order_id, decode(status, 'paid', 'P', 'shipped', 'S', 'other') AS d,
       zeroifnull(amount) AS z, nullifzero(CAST(order_id % 3 AS INT)) AS nz
FROM orders

-- name: cond_between_and_in_list
SELECT order_id, amount BETWEEN 100 AND 200 AS mid, status IN ('paid', 'shipped') AS settled,
       status NOT IN ('new') AS not_new
FROM orders

-- name: cond_try_cast_and_typeof
SELECT try_cast('12' AS INT) AS ok, try_cast('x1' AS INT) AS bad,
       typeof(1.5) AS t1, typeof(1.5D) AS t2, typeof(array(1)) AS t3

-- ===================================================================== structs / maps / arrays

-- name: nested_array_index_access
SELECT order_id, items[0] AS first_item, element_at(items, -1) AS last_item,
       get(items, 5) AS sixth_or_null, try_element_at(items, 10) AS tenth_or_null
FROM orders WHERE size(items) > 0

-- name: nested_map_access
SELECT id, tags['a'] AS a, tags['missing'] AS missing, element_at(tags, 'b') AS b,
       map_keys(tags) IS NOT NULL AS has_map
FROM events

-- name: nested_struct_field_access
SELECT id, device.os, device.version AS v, device.version >= 15 AS modern FROM events

-- name: nested_struct_star
SELECT id, device.* FROM events WHERE device IS NOT NULL

-- name: nested_named_struct_build
SELECT named_struct('id', order_id, 'amt', amount, 'st', status) AS s,
       struct(order_id AS id, customer_id) AS s2
FROM orders

-- name: nested_struct_of_struct_access
SELECT x.inner.b AS b, x.inner.c[1] AS c1, x.k
FROM (SELECT named_struct('k', 1, 'inner', named_struct('b', 'bee', 'c', array(7, 8, 9))) AS x)

-- name: nested_map_construction
SELECT map('k1', 1, 'k2', 2) AS m, map_from_arrays(array('a', 'b'), array(1, 2)) AS m2,
       str_to_map('a:1,b:2', ',', ':') AS m3, map_from_entries(array(struct('z', 26))) AS m4,
       map_concat(map('x', 1), map('y', 2)) AS m5

-- name: nested_map_functions
SELECT id, map_keys(tags) AS ks, map_values(tags) AS vs, size(tags) AS n,
       map_contains_key(tags, 'c') AS has_c, map_entries(tags) AS es
FROM events WHERE tags IS NOT NULL

-- name: nested_array_set_functions
SELECT order_id, array_distinct(items) AS d, array_union(items, array('P001')) AS u,
       array_intersect(items, array('P001', 'P002', 'P003')) AS i,
       array_except(items, array('P001')) AS e, arrays_overlap(items, array('P010')) AS o
FROM orders

-- name: nested_array_misc_functions
SELECT order_id, size(items) AS n, cardinality(items) AS c, array_contains(items, 'P005') AS has5,
       array_position(items, 'P005') AS pos5, array_remove(items, 'P005') AS no5,
       slice(items, 1, 2) AS first2, array_join(items, '/', '?') AS joined,
       array_max(items) AS mx, array_min(items) AS mn, sort_array(items, false) AS sorted_desc
FROM orders

-- name: nested_array_builders
SELECT array(1, 2, 3) AS a, sequence(1, 10, 3) AS s, array_repeat('x', 3) AS r,
       flatten(array(array(1, 2), array(3))) AS f, arrays_zip(array(1, 2), array('a', 'b')) AS z,
       concat(array(1), array(2, 3)) AS c, array_append(array(1, 2), 3) AS ap,
       array_prepend(array(2, 3), 1) AS pp, array_compact(array(1, NULL, 2)) AS cmp

-- name: nested_group_by_struct_field
SELECT device.os AS os, max(device.version) AS max_version, count(*) AS n
FROM events GROUP BY device.os

-- name: nested_order_by_struct
SELECT s FROM (SELECT struct(country, customer_id) AS s FROM customers)
ORDER BY s
LIMIT 10

-- name: nested_json_functions
SELECT id, to_json(device) AS dj, to_json(tags) AS tj,
       from_json('{"a": 1, "b": [1, 2]}', 'a INT, b ARRAY<INT>') AS parsed,
       get_json_object('{"x": {"y": 42}}', '$.x.y') AS y,
       json_array_length('[1, 2, 3]') AS jl
FROM events WHERE id < 10000000010

-- name: nested_collect_struct_sorted
SELECT customer_id,
       array_sort(collect_list(struct(order_id, amount))) AS orders_sorted
FROM orders GROUP BY customer_id

-- name: nested_explode_array_of_structs
SELECT customer_id, o.order_id, o.amount
FROM (SELECT customer_id, collect_list(struct(order_id, amount)) AS os FROM orders GROUP BY customer_id)
LATERAL VIEW explode(os) t AS o

-- ===================================================================== distinct

-- name: distinct_single_column
SELECT DISTINCT status FROM orders

-- name: distinct_multi_column_with_nulls
SELECT DISTINCT country, year(signup) AS yr FROM customers

-- name: distinct_count_multi_column
SELECT count(DISTINCT customer_id, status) AS n_pairs, count(DISTINCT status) AS n_status
FROM orders

-- name: distinct_sum_distinct
SELECT sum(DISTINCT amount) AS sd, avg(DISTINCT amount) AS ad, count(DISTINCT amount) AS cd
FROM orders

-- name: distinct_on_expression
SELECT DISTINCT date_trunc('DAY', ts) AS d FROM events

-- name: distinct_rows_removes_duplicates
-- (DISTINCT * is impossible here: map columns are not comparable in Spark)
SELECT count(*) AS n_rows,
       (SELECT count(*) FROM (SELECT DISTINCT id, user_id, ts, kind, value, device FROM events))
         AS n_distinct
FROM events

-- name: distinct_structs_and_arrays
SELECT DISTINCT device FROM events

-- name: distinct_array_values
SELECT DISTINCT sort_array(items) AS items FROM orders WHERE size(items) <= 1

-- name: distinct_with_order_by
SELECT DISTINCT sym, date_trunc('MINUTE', ts) AS m FROM ticks ORDER BY sym, m

-- name: distinct_grouped_count_distinct
SELECT kind, count(DISTINCT user_id) AS users, count(DISTINCT device.os) AS oses
FROM events GROUP BY kind

-- ===================================================================== order by / nulls ordering

-- name: order_nulls_last
SELECT customer_id, country FROM customers ORDER BY country NULLS LAST, customer_id

-- name: order_desc_nulls_first
SELECT order_id, amount FROM orders ORDER BY amount DESC NULLS FIRST, order_id

-- name: order_by_expression
SELECT order_id, amount FROM orders ORDER BY abs(amount - 250) NULLS LAST, order_id LIMIT 15

-- name: order_by_ordinal_and_alias
SELECT status AS s, count(*) AS n FROM orders GROUP BY status ORDER BY 2 DESC, s NULLS LAST

-- name: order_by_nan_and_nulls
-- Spark orders NaN above all other doubles; NULLs go last only because we ask
SELECT product_id, weight FROM products ORDER BY weight DESC NULLS LAST, product_id LIMIT 5

-- name: order_sort_by_within_partitions
SELECT sym, ts, px FROM ticks SORT BY sym, ts

-- name: order_distribute_by
SELECT sym, px FROM ticks DISTRIBUTE BY sym

-- name: order_cluster_by
SELECT kind, id FROM events CLUSTER BY kind

-- name: order_by_boolean_and_case
SELECT product_id, in_stock FROM products
ORDER BY in_stock DESC NULLS LAST,
         CASE WHEN category IS NULL THEN 1 ELSE 0 END, product_id

-- name: order_by_column_not_selected
SELECT name FROM customers ORDER BY signup NULLS FIRST, customer_id LIMIT 8

-- ===================================================================== limit / offset

-- name: limit_top_n
SELECT order_id, amount FROM orders ORDER BY amount DESC NULLS LAST, order_id LIMIT 10

-- name: limit_with_offset
SELECT order_id FROM orders ORDER BY order_id LIMIT 5 OFFSET 10

-- name: limit_offset_only
SELECT order_id FROM orders ORDER BY order_id OFFSET 230

-- name: limit_zero
SELECT * FROM orders LIMIT 0

-- name: limit_in_subquery
SELECT avg(amount) AS mean_top20 FROM (
  SELECT amount FROM orders WHERE amount IS NOT NULL ORDER BY amount DESC, order_id LIMIT 20
)

-- name: limit_per_group_via_window
SELECT * FROM (
  SELECT sym, ts, px, qty, row_number() OVER (PARTITION BY sym ORDER BY qty DESC NULLS LAST, ts, px) AS rn
  FROM ticks
) WHERE rn <= 2

-- name: limit_after_union
SELECT x FROM (SELECT order_id AS x FROM orders UNION ALL SELECT product_id FROM products)
ORDER BY x DESC LIMIT 7

-- name: limit_offset_with_ties_broken
SELECT status, amount, order_id FROM orders
ORDER BY status NULLS FIRST, amount NULLS FIRST, order_id
LIMIT 6 OFFSET 3

-- name: limit_larger_than_table
SELECT * FROM products ORDER BY product_id LIMIT 1000

-- name: limit_on_aggregate
SELECT customer_id, count(*) AS n FROM orders GROUP BY customer_id
ORDER BY n DESC, customer_id NULLS LAST LIMIT 5

-- ===================================================================== qualify

-- name: qualify_row_number_latest
SELECT customer_id, order_id, order_ts FROM orders
QUALIFY row_number() OVER (PARTITION BY customer_id ORDER BY order_ts DESC NULLS LAST, order_id DESC) = 1

-- name: qualify_rank_ties_kept
SELECT status, order_id, amount FROM orders
QUALIFY rank() OVER (PARTITION BY status ORDER BY amount DESC NULLS LAST) <= 2

-- name: qualify_select_alias
SELECT sym, ts, px, row_number() OVER (PARTITION BY sym ORDER BY px DESC, ts, qty) AS rn
FROM ticks
QUALIFY rn <= 3

-- name: qualify_named_window
SELECT sym, ts, px FROM ticks
WINDOW w AS (PARTITION BY sym ORDER BY ts, px, qty)
QUALIFY px > lag(px) OVER w

-- name: qualify_with_where_and_group
SELECT customer_id, count(*) AS n FROM orders
WHERE status IS NOT NULL
GROUP BY customer_id
QUALIFY dense_rank() OVER (ORDER BY n DESC) <= 3

-- name: qualify_dedupe_events
SELECT id, user_id, ts, kind FROM events
QUALIFY row_number() OVER (PARTITION BY id ORDER BY ts) = 1

-- name: qualify_count_over_partition
SELECT user_id, id, kind FROM events
WHERE user_id IS NOT NULL
QUALIFY count(*) OVER (PARTITION BY user_id) >= 8

-- name: qualify_compound_condition
SELECT order_id, customer_id, amount FROM orders
QUALIFY amount > avg(amount) OVER (PARTITION BY customer_id)
    AND count(*) OVER (PARTITION BY customer_id) > 2

-- name: qualify_percent_rank
SELECT product_id, category, price FROM products
QUALIFY percent_rank() OVER (PARTITION BY category ORDER BY price) >= 0.5

-- name: qualify_in_cte
WITH firsts AS (
  SELECT user_id, ts, kind FROM events WHERE user_id IS NOT NULL
  QUALIFY row_number() OVER (PARTITION BY user_id ORDER BY ts, id) = 1
)
SELECT kind, count(*) AS n FROM firsts GROUP BY kind

-- ===================================================================== VALUES inline tables

-- name: values_inline_table_alias
SELECT * FROM VALUES (1, 'a'), (2, 'b'), (3, NULL) AS t(id, label)

-- name: values_standalone_statement
VALUES (1, 2.5, 'x'), (2, NULL, 'y')

-- name: values_join_lookup
SELECT o.status, v.weight, count(*) AS n
FROM orders o
JOIN (VALUES ('paid', 1.0), ('shipped', 0.5), ('new', 0.0)) AS v(status, weight)
  ON o.status = v.status
GROUP BY o.status, v.weight

-- name: values_in_cte
WITH fx(ccy, rate) AS (VALUES ('USD', 1.0), ('EUR', 1.1), ('JPY', 0.0067))
SELECT ccy, rate * 100 AS per_100 FROM fx

-- name: values_typed_literals
SELECT * FROM VALUES
  (DATE '2024-01-01', TIMESTAMP '2024-01-01 12:00:00', 1.25BD, 7L),
  (DATE '2024-02-29', TIMESTAMP '2024-02-29 23:59:59', -0.5BD, 8L) AS t(d, ts, dec, big)

-- name: values_union_with_table
SELECT country FROM customers WHERE country IS NOT NULL
UNION
SELECT * FROM VALUES ('XX'), ('US') AS v(country)

-- name: values_single_column_aggregate
SELECT sum(x) AS s, max(x) AS m FROM VALUES (1), (2), (NULL), (4) AS t(x)

-- name: values_nested_types
SELECT id, arr[1] AS second, m['k'] AS mk, s.f AS sf FROM VALUES
  (1, array(10, 20), map('k', 'v'), named_struct('f', true)),
  (2, array(30, 40), map('k', 'w'), named_struct('f', false)) AS t(id, arr, m, s)

-- name: values_anti_join_missing_countries
SELECT v.country FROM VALUES ('US'), ('DE'), ('IT'), ('ES') AS v(country)
LEFT ANTI JOIN customers c ON c.country = v.country

-- name: values_without_alias_columns
SELECT col1, col2 FROM VALUES (1, 'one'), (2, 'two')

-- ===================================================================== literals, casts, math, misc

-- name: misc_numeric_functions
SELECT order_id, round(amount / 3, 2) AS r, bround(amount, -1) AS br, floor(amount) AS f,
       ceil(amount) AS c, sqrt(amount) AS sq, ln(amount + 1) AS l, pow(2, 10) AS p,
       abs(-amount) AS a, sign(amount - 250) AS sg
FROM orders WHERE amount IS NOT NULL

-- name: misc_integer_division_and_modulo
SELECT order_id, order_id DIV 7 AS q, order_id % 7 AS r, pmod(-order_id, 7) AS pm,
       mod(order_id, 5) AS m, order_id / 4 AS frac
FROM orders

-- name: misc_bitwise_and_shifts
SELECT product_id, product_id & 6 AS a, product_id | 1 AS o, product_id ^ 3 AS x, ~product_id AS n,
       shiftleft(product_id, 2) AS sl, product_id >> 1 AS sr, bit_count(product_id) AS bc
FROM products

-- name: misc_decimal_arithmetic
SELECT product_id, price, price * 2 AS doubled, price + 0.01 AS plus_cent,
       CAST(price AS DECIMAL(12, 4)) / 3 AS third, round(price, 0) AS rounded
FROM products

-- name: misc_casts
SELECT CAST(order_id AS STRING) AS s, CAST(amount AS INT) AS i, CAST(order_ts AS DATE) AS d,
       CAST(order_ts AS BIGINT) AS epoch, order_id::BIGINT AS b, CAST('1.5' AS DOUBLE) AS dbl,
       CAST(amount AS DECIMAL(10, 1)) AS dec
FROM orders WHERE amount IS NOT NULL

-- name: misc_typed_literals
SELECT 1Y AS tiny, 2S AS small, 3L AS big, 4.5BD AS dec, 1.5D AS dbl, 2.5F AS flt,
       X'CAFE' AS bin, DATE '2024-01-01' AS d, TIMESTAMP_NTZ '2024-01-01 00:00:00' AS ntz,
       DATE '2024-01-31' + INTERVAL '1' MONTH AS plus_month,
       INTERVAL '90' MINUTE AS dt_interval, 'it''s' AS quoted

-- name: misc_hash_functions
SELECT sku, hash(sku) AS h, xxhash64(sku) AS x, sha1(sku) AS s1, base64(sku) AS b64
FROM products

-- name: misc_nan_semantics
SELECT count(*) AS n, count(weight) AS n_weight, max(weight) AS mx, sum(weight) AS sm,
       sum(CASE WHEN isnan(weight) THEN 1 ELSE 0 END) AS n_nan,
       CAST('NaN' AS DOUBLE) = CAST('NaN' AS DOUBLE) AS nan_eq
FROM products

-- name: misc_where_compound_predicates
SELECT order_id FROM orders
WHERE (status = 'paid' OR status IS NULL) AND NOT (amount < 50) AND customer_id IS NOT NULL

-- name: misc_identifier_quoting
SELECT `order_id` AS `order id`, `status` AS `select` FROM orders WHERE `amount` > 490

-- name: misc_star_except
SELECT * EXCEPT (items, order_ts) FROM orders WHERE order_id <= 5

-- name: misc_aggregate_over_empty
SELECT count(*) AS n, sum(amount) AS s, max(order_ts) AS mx FROM orders WHERE 1 = 0

-- name: misc_range_and_sequence_calendar
SELECT d, count(o.order_id) AS n
FROM (SELECT explode(sequence(DATE '2024-01-01', DATE '2024-01-31', INTERVAL 1 DAY)) AS d) cal
LEFT JOIN orders o ON to_date(o.order_ts) = cal.d
GROUP BY d

-- name: misc_ticks_ohlc
SELECT sym, date_trunc('MINUTE', ts) AS minute,
       min_by(px, struct(ts, px)) AS open, max(px) AS high, min(px) AS low,
       max_by(px, struct(ts, px)) AS close, sum(qty) AS volume
FROM ticks
GROUP BY sym, date_trunc('MINUTE', ts)

-- name: misc_stddev_corr
SELECT sym, stddev(px) AS sd, variance(px) AS var, corr(px, qty) AS c, covar_pop(px, qty) AS cv,
       skewness(px) AS sk, kurtosis(px) AS ku
FROM ticks GROUP BY sym

-- ===================================================================== lexical / dialect edge cases
-- (quoting, escapes, literal and operator spellings: where a SQL front end most easily
-- diverges from Spark's own parser)

-- name: lex_double_quoted_string
-- Spark (non-ANSI identifiers): double quotes delimit a STRING literal, not an identifier
SELECT "paid" AS s, count(*) AS n FROM orders WHERE status = "paid"

-- name: lex_escaped_quotes_and_backslashes
SELECT 'it\'s' AS a, "say \"hi\"" AS b, 'tab\there' AS c, 'back\\slash' AS d, length('\n') AS nl

-- name: lex_raw_string_literal
SELECT r'\d+\.\d+' AS pattern, regexp_extract('v12.5x', r'(\d+\.\d+)', 1) AS num

-- name: lex_doubled_quote_escape
SELECT 'O''Brien' AS name, length('''') AS one_quote

-- name: lex_regex_escapes
SELECT sku, regexp_replace(name, '\\s+', '_') AS snake, name RLIKE '^[A-Z][a-z]+\\s' AS two_words,
       regexp_extract(sku, 'P(\\d{2})(\\d)', 2) AS last_digit
FROM products

-- name: lex_like_escape
SELECT s, s LIKE 'a\\_%' AS esc_default, s LIKE 'a!_%' ESCAPE '!' AS esc_bang
FROM VALUES ('a_b'), ('ab'), ('a%b') AS t(s)

-- name: lex_comparison_operator_spellings
SELECT order_id FROM orders
WHERE status == 'paid' AND amount != 100 AND customer_id <> 3

-- name: lex_not_less_not_greater_operators
-- `!<` / `!>` are Spark spellings of >= / <=
SELECT order_id FROM orders WHERE order_id !< 230 AND amount !> 400

-- name: lex_backquoted_identifiers
SELECT `weird col`, `select`.`from` FROM (SELECT 1 AS `weird col`, named_struct('from', 2) AS `select`)

-- name: lex_case_insensitive_keywords_functions
select Status, COUNT(*) as N, Sum(Amount) AS total from ORDERS group BY status

-- name: lex_interval_literal_forms
SELECT TIMESTAMP '2024-01-01 00:00:00' + INTERVAL 1 DAY 2 HOURS AS a,
       TIMESTAMP '2024-01-01 00:00:00' + INTERVAL '1 2:03:04' DAY TO SECOND AS b,
       DATE '2024-01-31' + INTERVAL '1-2' YEAR TO MONTH AS c,
       TIMESTAMP '2024-01-01 00:00:00' - INTERVAL '30' SECOND AS d,
       TIMESTAMP '2024-01-01 00:00:00' + make_interval(0, 1, 0, 1, 2, 0, 0) AS e

-- name: lex_is_true_false_unknown
SELECT order_id, (amount > 300) IS TRUE AS t, (amount > 300) IS NOT FALSE AS nf,
       (amount > 300) IS UNKNOWN AS u
FROM orders

-- name: lex_unicode_strings
SELECT 'naïve café' AS s, upper('straße') AS u, length('日本') AS n, '€' || 'x' AS e

-- name: lex_numeric_literal_forms
SELECT 1e3 AS sci, 1.5E-2 AS sci2, .5 AS leading_dot, 5. AS trailing_dot, -2147483648 AS min_int, 9223372036854775807L AS max_long, 12345678901234567890BD AS big_dec

-- name: lex_varchar_char_types
SELECT CAST(name AS VARCHAR(5)) AS v, CAST('ab' AS CHAR(4)) AS c, typeof(CAST('x' AS VARCHAR(3))) AS t
FROM customers WHERE customer_id < 5

-- name: lex_hints_repartition_coalesce
SELECT /*+ REPARTITION(3), COALESCE(2) */ sym, count(*) AS n FROM ticks GROUP BY sym

-- name: lex_select_all_and_nested_parens
SELECT ALL ((order_id + 1) * (2)) AS x FROM ((SELECT order_id FROM orders)) WHERE ((order_id < 5))

-- name: lex_try_arithmetic
SELECT try_add(2147483647, 1) AS ta, try_subtract(DATE '2024-01-01', 1) AS ts,
       try_multiply(3, 4) AS tm, try_divide(1, 0) AS td, 2147483647L + 1 AS widened

-- name: lex_string_functions_newer
SELECT btrim('xxhixx', 'x') AS bt, regexp_count('a1b22c333', '\\d') AS rc,
       regexp_substr('abc123def', '[0-9]+') AS rs, to_char(1234.5, '9,999.99') AS tc,
       to_number('$1,234.50', '$9,999.99') AS tn, mask('Ab1-x') AS mk, equal_null(NULL, NULL) AS en

-- name: lex_array_agg_and_any
SELECT status, sort_array(array_agg(order_id)) AS ids, any(amount > 480) AS any_big,
       some(amount < 10) AS some_small
FROM orders GROUP BY status

-- name: lex_width_bucket_conv
SELECT order_id, width_bucket(amount, 0, 500, 5) AS bucket, conv(CAST(order_id AS STRING), 10, 2) AS bin,
       bin(order_id) AS bin2, hex(order_id) AS hx
FROM orders WHERE amount IS NOT NULL

-- name: lex_parse_url_and_json_tuple
SELECT parse_url('https://x.org/a/b?q=1&r=2', 'HOST') AS host,
       parse_url('https://x.org/a/b?q=1&r=2', 'QUERY', 'r') AS r,
       j.a, j.b
FROM (SELECT '{"a": "1", "b": {"c": 2}}' AS js) LATERAL VIEW json_tuple(js, 'a', 'b') j AS a, b
