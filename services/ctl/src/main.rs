//! `overcastctl`: a CSI client for any driver's socket. Tables for people, `-o json`
//! for scripts, `-q` for the one value a shell variable wants. A failed call prints
//! `error: <GRPC_CODE>: <message>` and exits with the gRPC code's number (NOT_FOUND is
//! 5); a command line that does not parse exits 64.

mod cli;
mod output;
mod run;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let usage = !matches!(
                e.kind(),
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
            );
            let _ = e.print();
            return ExitCode::from(if usage { 64 } else { 0 });
        }
    };
    let path = match overcast_runtime::socket::parse_endpoint(&cli.endpoint) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(64);
        }
    };
    let channel =
        overcast_runtime::client::unix_channel(&path, Some(Duration::from_secs(cli.timeout)));
    match run::run(&cli.group, channel).await {
        Ok(report) => {
            report.print(cli.output, cli.quiet);
            ExitCode::SUCCESS
        }
        Err(run::Failure::Rpc(status)) if status.code() == tonic::Code::Unavailable => {
            // The connection's own error ("No such file or directory") names no socket.
            eprintln!(
                "error: UNAVAILABLE: {}: {}",
                path.display(),
                status.message()
            );
            ExitCode::from(status.code() as u8)
        }
        Err(run::Failure::Rpc(status)) => {
            eprintln!("error: {}: {}", code_name(status.code()), status.message());
            ExitCode::from(status.code() as u8)
        }
        Err(run::Failure::Usage(message)) => {
            eprintln!("error: {message}");
            ExitCode::from(64)
        }
    }
}

fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "CANCELLED",
        Unknown => "UNKNOWN",
        InvalidArgument => "INVALID_ARGUMENT",
        DeadlineExceeded => "DEADLINE_EXCEEDED",
        NotFound => "NOT_FOUND",
        AlreadyExists => "ALREADY_EXISTS",
        PermissionDenied => "PERMISSION_DENIED",
        ResourceExhausted => "RESOURCE_EXHAUSTED",
        FailedPrecondition => "FAILED_PRECONDITION",
        Aborted => "ABORTED",
        OutOfRange => "OUT_OF_RANGE",
        Unimplemented => "UNIMPLEMENTED",
        Internal => "INTERNAL",
        Unavailable => "UNAVAILABLE",
        DataLoss => "DATA_LOSS",
        Unauthenticated => "UNAUTHENTICATED",
    }
}
