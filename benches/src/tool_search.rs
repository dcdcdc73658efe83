//! The tool-search fixture: a 5,000-tool catalog of labelled tools (data/tool-search-targets.json)
//! among generated tools of the same and other services that share their verbs and nouns
//! ("create issue" exists in dozens of trackers), and labelled task descriptions naming the tool
//! that does each (data/tool-search-queries.json). Used by the quality test (tests/tool_search.rs)
//! and the search benchmark (benches/search.rs).

use serde::Deserialize;

/// One tool of the fixture catalog.
#[derive(Debug, Clone, Deserialize)]
pub struct Tool {
    /// `service/tool`, e.g. `github/create_issue`.
    pub name: String,
    pub title: String,
    pub description: String,
    /// Parameter names, space-separated.
    pub params: String,
}

/// A task description and the tool that does it.
#[derive(Debug, Clone, Deserialize)]
pub struct Labelled {
    pub query: String,
    pub expect: String,
}

/// How many tools [`catalog`] holds.
pub const CATALOG_SIZE: usize = 5_000;

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

fn load<T: for<'de> Deserialize<'de>>(text: &str) -> Vec<T> {
    // The fixture files are part of this crate; a broken one is a broken build.
    serde_json::from_str(text).unwrap_or_else(|e| panic!("tool-search fixture: {e}"))
}

/// The labelled task descriptions.
pub fn labelled() -> Vec<Labelled> {
    load(include_str!("../data/tool-search-queries.json"))
}

/// The labelled tools, then generated tools up to [`CATALOG_SIZE`], in a fixed order.
pub fn catalog() -> Vec<Tool> {
    let mut tools: Vec<Tool> = load(include_str!("../data/tool-search-targets.json"));
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
            let Some(object) = OBJECTS.get((state >> 33) as usize % OBJECTS.len()) else {
                continue;
            };
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
