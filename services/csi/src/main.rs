use clap::Parser;
use overcast_csi::driver::Driver;
use overcast_csi::options::Options;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let options = Options::parse();
    overcast_runtime::logging::init(options.log_format);
    let driver = Driver::start(options).await?;
    driver
        .serve(overcast_runtime::shutdown::signal_received())
        .await
}
