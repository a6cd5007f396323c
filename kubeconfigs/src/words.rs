//! The words of a failed request, for status messages, CLI errors and logs: the API server's own
//! for API errors, the error and its causes for transport failures (a refused connection says so).
//! One rule for every crate, so a failure reads the same wherever it is reported.

/// `<code> <reason>: <message>` for an API error, else the error with its causes.
pub fn describe_error(error: &kube::Error) -> String {
    let text = match error {
        kube::Error::Api(status) => {
            let head = [status.code.to_string(), status.reason.clone()]
                .into_iter()
                .filter(|part| !part.is_empty() && part != "0")
                .collect::<Vec<_>>()
                .join(" ");
            match (head.is_empty(), status.message.is_empty()) {
                (_, true) => head,
                (true, false) => status.message.clone(),
                (false, false) => format!("{head}: {}", status.message),
            }
        }
        other => with_causes(other),
    };
    text.trim_end().to_string()
}

fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_errors_keep_the_servers_words() {
        let status = kube::core::Status {
            code: 404,
            reason: "NotFound".into(),
            message: "combs.comb.internal \"db\" not found".into(),
            ..kube::core::Status::default()
        };
        assert_eq!(
            describe_error(&kube::Error::Api(Box::new(status))),
            "404 NotFound: combs.comb.internal \"db\" not found"
        );
        let bare = kube::core::Status {
            code: 503,
            ..kube::core::Status::default()
        };
        assert_eq!(describe_error(&kube::Error::Api(Box::new(bare))), "503");
    }

    #[test]
    fn other_errors_name_their_causes() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        assert_eq!(
            describe_error(&kube::Error::ReadEvents(io)),
            "Error reading events stream: connection refused"
        );
    }
}
