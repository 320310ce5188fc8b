//! A command or ticket whose protobuf does not decode is the client's
//! fault: INVALID_ARGUMENT. arrow-rs reports a broken outer `Any` so, but
//! a known command with a broken body as INTERNAL (its decoder's message);
//! the front checks both before dispatching.

use arrow_flight::sql::{Any, Command};
use prost::Message;
use tonic::Status;

/// Checks that `bytes` decode as a Flight SQL command (an `Any` and, for a
/// command type Flight SQL knows, its body).
pub fn check_command(bytes: &[u8], what: &str) -> Result<(), Status> {
    let any = Any::decode(bytes)
        .map_err(|e| Status::invalid_argument(format!("a malformed {what}: {e}")))?;
    let type_url = any.type_url.clone();
    Command::try_from(any)
        .map(|_| ())
        .map_err(|e| Status::invalid_argument(format!("a malformed {what} ({type_url}): {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_flight::sql::{ProstMessageExt, TicketStatementQuery};

    #[test]
    fn a_known_command_with_a_broken_body_is_invalid_argument() {
        let mut any = TicketStatementQuery {
            statement_handle: b"handle".to_vec().into(),
        }
        .as_any();
        // A field whose length runs past the end of the message.
        any.value = vec![0x0a, 0x7f, b'x'].into();
        let status = check_command(&any.encode_to_vec(), "ticket").unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(
            status.message().contains("TicketStatementQuery"),
            "{status}"
        );
    }

    #[test]
    fn broken_framing_of_the_outer_message_is_invalid_argument() {
        let status = check_command(&[0x0a, 0x7f], "ticket").unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
    }

    #[test]
    fn good_and_unknown_commands_pass() {
        let good = TicketStatementQuery {
            statement_handle: b"handle".to_vec().into(),
        };
        assert!(check_command(&good.as_any().encode_to_vec(), "ticket").is_ok());
        let unknown = Any {
            type_url: "type.googleapis.com/somebody.Else".into(),
            value: vec![1, 2, 3].into(),
        };
        assert!(check_command(&unknown.encode_to_vec(), "ticket").is_ok());
    }
}
