//! What a command prints: the same result as an aligned table, as JSON, or as the one
//! value a script wants.

use serde_json::Value;

use crate::cli::Output;

pub struct Report {
    pub json: Value,
    pub header: Vec<&'static str>,
    pub rows: Vec<Vec<String>>,
    /// What `-q` prints.
    pub quiet: String,
}

impl Report {
    /// A single object shown as FIELD/VALUE rows.
    pub fn fields(json: Value, quiet: String) -> Self {
        let rows = match &json {
            Value::Object(map) => map.iter().map(|(k, v)| vec![k.clone(), plain(v)]).collect(),
            other => vec![vec!["value".into(), plain(other)]],
        };
        Self {
            json,
            header: vec!["FIELD", "VALUE"],
            rows,
            quiet,
        }
    }

    pub fn print(&self, output: Output, quiet: bool) {
        if quiet {
            if !self.quiet.is_empty() {
                println!("{}", self.quiet);
            }
            return;
        }
        match output {
            Output::Json => println!(
                "{}",
                serde_json::to_string_pretty(&self.json).unwrap_or_default()
            ),
            Output::Table => print_table(&self.header, &self.rows),
        }
    }
}

/// A JSON value as a table cell: strings bare, objects as k=v words, lists comma-joined.
pub fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        Value::Array(items) => items.iter().map(plain).collect::<Vec<_>>().join(","),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| format!("{k}={}", plain(v)))
            .collect::<Vec<_>>()
            .join(" "),
        other => other.to_string(),
    }
}

fn print_table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
            .collect();
        println!("{}", padded.join("  ").trim_end());
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}
