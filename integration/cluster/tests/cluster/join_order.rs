//! Joins ordered by statistics, through a real coordinator: EXPLAIN shows
//! the written and the chosen order, and the multi-join TPC-H queries
//! answer as single-node DataFusion does with the reordering on and off,
//! and with filters weighed on samples.

use crate::support::{
    client, coordinator, explain_rows, oracle_context, query, tpch_data, tpch_mismatches,
    tpch_query,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_shows_the_chosen_order_and_answers_match_either_way() {
    let (_dir, tables) = tpch_data(0.01);
    let server = coordinator(vec![], tables.clone()).await;
    let oracle_ctx = oracle_context(&tables).await;
    let mut on = client(&server).await;
    let mut off = client(&server).await;
    query(&mut off, "SET squadron.join_reorder = false")
        .await
        .unwrap();
    let mut sampled = client(&server).await;
    query(&mut sampled, "SET squadron.join_reorder_samples = true")
        .await
        .unwrap();

    let q5 = format!("EXPLAIN {}", tpch_query(5));
    let reordered = explain_rows(&query(&mut on, &q5).await.unwrap());
    let decisions: Vec<&String> = reordered
        .iter()
        .filter(|(kind, _)| kind == "join_order")
        .map(|(_, plan)| plan)
        .collect();
    assert_eq!(decisions.len(), 1, "{reordered:?}");
    assert!(
        decisions[0].contains(
            "written: (((((customer ⋈ orders) ⋈ lineitem) ⋈ supplier) ⋈ nation) ⋈ region)"
        ) && decisions[0].contains("chosen: "),
        "{decisions:?}"
    );
    let written = explain_rows(&query(&mut off, &q5).await.unwrap());
    assert!(written.iter().all(|(kind, _)| kind != "join_order"));
    let physical = |rows: &[(String, String)]| {
        rows.iter()
            .find(|(kind, _)| kind == "physical_plan")
            .map(|(_, plan)| plan.clone())
            .unwrap()
    };
    assert_ne!(physical(&reordered), physical(&written));

    // Sampled, q21's `l1` (lineitem where one date column exceeds
    // another, which statistics cannot weigh) is estimated otherwise.
    let q21 = format!("EXPLAIN {}", tpch_query(21));
    let estimates = |rows: Vec<(String, String)>| {
        rows.into_iter()
            .find(|(kind, _)| kind == "join_order")
            .map(|(_, plan)| plan.split("; written").next().unwrap_or("").to_string())
    };
    let unsampled = estimates(explain_rows(&query(&mut on, &q21).await.unwrap()));
    let measured = estimates(explain_rows(&query(&mut sampled, &q21).await.unwrap()));
    assert!(
        unsampled.is_some() && measured.is_some() && unsampled != measured,
        "{unsampled:?} {measured:?}"
    );

    let failures = tpch_mismatches(
        &oracle_ctx,
        [2, 5, 7, 8, 9, 10, 11, 21],
        &mut [
            ("on", &mut on),
            ("off", &mut off),
            ("sampled", &mut sampled),
        ],
    )
    .await;
    assert!(failures.is_empty(), "mismatches:\n{}", failures.join("\n"));
    server.shutdown().await.unwrap();
}
