use clap::Parser;
use overcast_csi::driver::Driver;
use overcast_csi::options::Options;

// Not `#[tokio::main]`: SIGTERM is caught from the first instruction (a pod killed while
// it starts), and one during the start ends it there, its socket removed.
fn main() -> anyhow::Result<()> {
    overcast_runtime::shutdown::run(|mut signals| async move {
        let options = Options::parse();
        overcast_runtime::logging::init(options.log_format);
        let driver = tokio::select! {
            driver = Driver::start(options) => driver?,
            () = signals.received() => return Ok(()),
        };
        driver.serve(async move { signals.received().await }).await
    })
}
