//! The words of a failed request, for status messages, CLI errors and logs: the API server's own
//! for API errors, the error and its causes for transport failures (a refused connection says so).
//! One rule for every crate, so a failure reads the same wherever it is reported.

/// `<code> <reason>: <message>` for an API error, else the error with its causes.
///
/// Of the server's message only the first line is kept: kube-apiserver follows some refusals
/// with a dump of the object (a refused Pod update with a diff of the whole Pod spec, its
/// environment's values included), which must not reach a status, an Event or a log line.
pub fn describe_error(error: &kube::Error) -> String {
    let text = match error {
        kube::Error::Api(status) => {
            let head = [status.code.to_string(), status.reason.clone()]
                .into_iter()
                .filter(|part| !part.is_empty() && part != "0")
                .collect::<Vec<_>>()
                .join(" ");
            let message = status.message.lines().next().unwrap_or_default();
            match (head.is_empty(), message.is_empty()) {
                (_, true) => head,
                (true, false) => message.to_string(),
                (false, false) => format!("{head}: {message}"),
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

    /// What `describe_error` says of an API server's answer with `code`, `reason` and `message`.
    fn described(code: u16, reason: &str, message: &str) -> String {
        let status = kube::core::Status {
            code,
            reason: reason.into(),
            message: message.into(),
            ..kube::core::Status::default()
        };
        describe_error(&kube::Error::Api(Box::new(status)))
    }

    #[test]
    fn api_errors_keep_the_servers_first_line() {
        let cases = [
            (
                (404, "NotFound", "combs.comb.internal \"db\" not found"),
                "404 NotFound: combs.comb.internal \"db\" not found",
            ),
            ((503, "", ""), "503"),
            // kube-apiserver follows a refused Pod update with a diff of the whole spec.
            (
                (
                    422,
                    "Invalid",
                    "Pod \"probe\" is invalid: spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`\n  core.PodSpec{\n-  Env: nil,\n+  Env: []core.EnvVar{{Name: \"TOKEN\", Value: \"s3cret\"}},\n  }",
                ),
                "422 Invalid: Pod \"probe\" is invalid: spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`",
            ),
        ];
        for ((code, reason, message), expected) in cases {
            assert_eq!(described(code, reason, message), expected);
        }
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
