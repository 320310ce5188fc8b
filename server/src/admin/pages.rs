//! The UI's pages: a shell each (title, navigation, the containers the
//! script fills) and the embedded script and style sheet.

use axum::extract::Path;
use axum::http::{header, HeaderValue};
use axum::response::{Html, IntoResponse, Response};

const SCRIPT: &str = include_str!("assets/ui.js");
const STYLE: &str = include_str!("assets/ui.css");

fn page(title: &str, kind: &str, id: &str, body: &str) -> Html<String> {
    Html(format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>{title} · Squadron</title>\
         <link rel=\"stylesheet\" href=\"/ui/assets/ui.css\"></head>\
         <body data-page=\"{kind}\" data-id=\"{id}\">\
         <nav><a href=\"/ui\">Queries</a> <a href=\"/ui/workers\">Workers</a></nav>\
         <main>{body}</main>\
         <script src=\"/ui/assets/ui.js\"></script></body></html>"
    ))
}

pub async fn queries() -> Html<String> {
    page(
        "Queries",
        "queries",
        "",
        "<h1>Queries</h1><p>Running first, then the most recent ended ones.</p>\
         <table id=\"queries\"><thead><tr><th>state</th><th>user</th><th>started</th>\
         <th>elapsed</th><th>stages</th><th>tasks</th><th>rows</th><th>SQL</th>\
         <th>error</th></tr></thead><tbody></tbody></table>",
    )
}

pub async fn query(Path(id): Path<String>) -> Html<String> {
    // The id goes into an attribute: only what a query id may hold.
    let id: String = id
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect();
    page(
        "Query",
        "query",
        &id,
        "<h1>Query <span id=\"query-id\"></span></h1>\
         <p>State: <b id=\"state\"></b> · <span id=\"summary\"></span></p>\
         <pre id=\"sql\"></pre><pre id=\"error\" hidden></pre>\
         <h2>Stages</h2><svg id=\"stages\"></svg>\
         <h2>Tasks by worker</h2><svg id=\"timeline\"></svg>\
         <table id=\"tasks\"><thead><tr><th>stage</th><th>task</th><th>attempt</th>\
         <th>worker</th><th>state</th><th>elapsed ms</th><th>output rows</th>\
         <th>output bytes</th><th>input rows</th><th>input bytes</th><th>compute µs</th>\
         <th>spilled bytes</th><th>peak memory</th><th>error</th></tr></thead>\
         <tbody></tbody></table><h2>Stage plans</h2><div id=\"plans\"></div>",
    )
}

pub async fn workers() -> Html<String> {
    page(
        "Workers",
        "workers",
        "",
        "<h1>Workers</h1><table id=\"workers\"><thead><tr><th>URL</th><th>state</th>\
         <th>running tasks</th><th>last seen</th></tr></thead><tbody></tbody></table>",
    )
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [(header::CONTENT_TYPE, HeaderValue::from_static(content_type))],
        body,
    )
        .into_response()
}

pub async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

pub async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}
