//! Tool search over a 5,000-tool catalog: a labelled set of task descriptions, each naming the
//! tool that does it (tests/data/tool-search-queries.json), must find that tool in the top five
//! for at least 90% of the queries. The catalog is the labelled tools
//! (tests/data/tool-search-targets.json) among generated tools of the same and other services
//! that share their verbs and nouns ("create issue" exists in dozens of trackers), so a query must
//! be matched on what distinguishes its tool, not on a common word.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test fixtures fail loudly

use serde::Deserialize;
use toolplane_text::{ToolFields, ToolIndex};

#[derive(Debug, Deserialize)]
struct Tool {
    name: String,
    title: String,
    description: String,
    params: String,
}

#[derive(Deserialize)]
struct Labelled {
    query: String,
    expect: String,
}

const CATALOG_SIZE: usize = 5_000;

const SERVICES: &[(&str, &str)] = &[
    ("github", "GitHub"),
    ("gitlab", "GitLab"),
    ("bitbucket", "Bitbucket"),
    ("jira", "Jira"),
    ("linear", "Linear"),
    ("asana", "Asana"),
    ("trello", "Trello"),
    ("notion", "Notion"),
    ("confluence", "Confluence"),
    ("slack", "Slack"),
    ("teams", "Microsoft Teams"),
    ("discord", "Discord"),
    ("zoom", "Zoom"),
    ("gmail", "Gmail"),
    ("outlook", "Outlook"),
    ("gcal", "Google Calendar"),
    ("dropbox", "Dropbox"),
    ("box", "Box"),
    ("gdrive", "Google Drive"),
    ("onedrive", "OneDrive"),
    ("aws", "AWS"),
    ("gcp", "Google Cloud"),
    ("azure", "Azure"),
    ("postgres", "PostgreSQL"),
    ("mysql", "MySQL"),
    ("mongodb", "MongoDB"),
    ("redis", "Redis"),
    ("elastic", "Elasticsearch"),
    ("snowflake", "Snowflake"),
    ("bigquery", "BigQuery"),
    ("stripe", "Stripe"),
    ("paypal", "PayPal"),
    ("shopify", "Shopify"),
    ("salesforce", "Salesforce"),
    ("hubspot", "HubSpot"),
    ("zendesk", "Zendesk"),
    ("intercom", "Intercom"),
    ("twilio", "Twilio"),
    ("sendgrid", "SendGrid"),
    ("mailchimp", "Mailchimp"),
    ("figma", "Figma"),
    ("miro", "Miro"),
    ("airtable", "Airtable"),
    ("sheets", "Google Sheets"),
    ("excel", "Excel"),
    ("docker", "Docker"),
    ("kubernetes", "Kubernetes"),
    ("terraform", "Terraform"),
    ("datadog", "Datadog"),
    ("sentry", "Sentry"),
    ("pagerduty", "PagerDuty"),
    ("grafana", "Grafana"),
    ("circleci", "CircleCI"),
    ("jenkins", "Jenkins"),
    ("vercel", "Vercel"),
    ("netlify", "Netlify"),
    ("cloudflare", "Cloudflare"),
    ("npm", "npm"),
    ("pypi", "PyPI"),
    ("spotify", "Spotify"),
    ("youtube", "YouTube"),
    ("twitter", "X"),
    ("linkedin", "LinkedIn"),
    ("reddit", "Reddit"),
    ("monday", "monday.com"),
    ("clickup", "ClickUp"),
    ("todoist", "Todoist"),
    ("quickbooks", "QuickBooks"),
    ("xero", "Xero"),
    ("docusign", "DocuSign"),
    ("calendly", "Calendly"),
    ("okta", "Okta"),
    ("auth0", "Auth0"),
    ("segment", "Segment"),
    ("mixpanel", "Mixpanel"),
    ("amplitude", "Amplitude"),
    ("contentful", "Contentful"),
    ("wordpress", "WordPress"),
    ("webflow", "Webflow"),
    ("sqlite", "SQLite"),
];

const OBJECTS: &[&str] = &[
    "issue",
    "comment",
    "project",
    "user",
    "team",
    "file",
    "folder",
    "message",
    "channel",
    "event",
    "invoice",
    "customer",
    "payment",
    "order",
    "product",
    "record",
    "table",
    "row",
    "dashboard",
    "alert",
    "incident",
    "deployment",
    "build",
    "pipeline",
    "secret",
    "label",
    "tag",
    "note",
    "task",
    "contact",
    "ticket",
    "report",
    "webhook",
    "subscription",
    "branch",
    "release",
    "page",
    "document",
    "workspace",
    "role",
    "group",
    "campaign",
    "template",
    "form",
    "bucket",
    "instance",
    "cluster",
    "database",
    "query",
    "snippet",
];

const VERBS: &[(&str, &str)] = &[
    ("create", "Create a new {o} in {S}."),
    ("get", "Get a {o} from {S} by its id."),
    ("list", "List the {o}s of {S}, newest first."),
    ("update", "Update the fields of a {S} {o}."),
    ("delete", "Delete a {o} from {S}."),
    ("search", "Search {S} {o}s matching a query."),
    (
        "archive",
        "Archive a {S} {o} so it no longer appears in lists.",
    ),
    ("export", "Export {S} {o}s as CSV."),
    ("count", "Count the {o}s in {S}."),
    ("watch", "Subscribe to changes of a {S} {o}."),
];

fn load<T: for<'de> Deserialize<'de>>(file: &str) -> Vec<T> {
    let path = format!("{}/tests/data/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The labelled tools, then generated tools up to [`CATALOG_SIZE`], in a fixed order.
fn catalog() -> Vec<Tool> {
    let mut tools: Vec<Tool> = load("tool-search-targets.json");
    let mut names: std::collections::HashSet<String> =
        tools.iter().map(|t| t.name.clone()).collect();
    // A small linear congruential sequence picks each service's objects: fixed, and different
    // per service.
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    'fill: loop {
        for (service, display) in SERVICES {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            let object = OBJECTS[(state >> 33) as usize % OBJECTS.len()];
            for (verb, template) in VERBS {
                if tools.len() >= CATALOG_SIZE {
                    break 'fill;
                }
                let name = format!("{service}/{verb}_{object}");
                if !names.insert(name.clone()) {
                    continue;
                }
                tools.push(Tool {
                    name,
                    title: format!("{verb} {object}"),
                    description: template.replace("{o}", object).replace("{S}", display),
                    params: format!("{object}_id name query limit"),
                });
            }
        }
        if names.len() >= SERVICES.len() * OBJECTS.len() * VERBS.len() {
            break;
        }
    }
    tools
}

fn index(tools: &[Tool]) -> ToolIndex {
    ToolIndex::build(tools.iter().map(|t| ToolFields {
        name: &t.name,
        title: &t.title,
        description: &t.description,
        params: &t.params,
    }))
}

#[test]
fn the_labelled_tool_is_in_the_top_five_for_nine_queries_in_ten() {
    let tools = catalog();
    assert_eq!(tools.len(), CATALOG_SIZE);
    let index = index(&tools);
    let labelled: Vec<Labelled> = load("tool-search-queries.json");
    assert!(
        labelled.len() >= 50,
        "the labelled set has {} queries",
        labelled.len()
    );

    let mut found = 0usize;
    let mut misses = Vec::new();
    for case in &labelled {
        assert!(
            tools.iter().any(|t| t.name == case.expect),
            "{} is not in the catalog",
            case.expect
        );
        let hits = index.search(&case.query, 5).unwrap();
        let names: Vec<&str> = hits.iter().map(|h| tools[h.index].name.as_str()).collect();
        if names.contains(&case.expect.as_str()) {
            found += 1;
        } else {
            misses.push(format!(
                "{:?} → {names:?}, wanted {}",
                case.query, case.expect
            ));
        }
    }
    let rate = found as f64 / labelled.len() as f64;
    println!(
        "top-5 hit rate: {found}/{} = {:.1}%; misses:\n{}",
        labelled.len(),
        rate * 100.0,
        misses.join("\n")
    );
    assert!(
        rate >= 0.9,
        "top-5 hit rate {:.1}% < 90%:\n{}",
        rate * 100.0,
        misses.join("\n")
    );
}

#[test]
fn a_service_name_alone_ranks_that_services_tools_first() {
    let tools = catalog();
    let index = index(&tools);
    let hits = index.search("PagerDuty", 10).unwrap();
    assert!(!hits.is_empty());
    assert!(
        hits.iter()
            .all(|h| tools[h.index].name.starts_with("pagerduty/"))
    );
}
