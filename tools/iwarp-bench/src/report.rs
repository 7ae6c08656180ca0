//! Results on the terminal (a table) or for tools (CSV, JSON).

use crate::tests::Outcome;
use crate::Options;

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Table,
    Csv,
    Json,
}

impl Format {
    pub(crate) fn parse(s: &str) -> Result<Format, String> {
        match s {
            "table" => Ok(Format::Table),
            "csv" => Ok(Format::Csv),
            "json" => Ok(Format::Json),
            _ => Err(format!("unknown format {s}")),
        }
    }
}

/// A line per result as it comes (table only: tools get the whole set at the end).
pub(crate) fn progress(f: Format, r: &Outcome) {
    if f != Format::Table {
        return;
    }
    if r.test.is_latency() {
        println!(
            "{:<10} {:>9} B {:>7} iters   lat mean {:>9.2} us  p50 {:>9.2} us  p99 {:>9.2} us",
            r.test.name(),
            r.size,
            r.iters,
            r.lat_us[0],
            r.lat_us[1],
            r.lat_us[2]
        );
    } else {
        println!(
            "{:<10} {:>9} B {:>7} iters {:>3} QPs   bw {:>10.2} MB/s  ({:.3} Gb/s)",
            r.test.name(),
            r.size,
            r.iters,
            r.qps,
            r.bytes_per_sec / 1e6,
            r.bytes_per_sec * 8.0 / 1e9
        );
    }
}

/// The whole set (CSV or JSON), with the connection options.
pub(crate) fn print(f: Format, o: &Options, rs: &[Outcome]) {
    match f {
        Format::Table => {}
        Format::Csv => {
            println!("test,size,iters,qps,markers,crc,mpa_rev,bw_bytes_per_sec,lat_mean_us,lat_p50_us,lat_p99_us");
            for r in rs {
                println!(
                    "{},{},{},{},{},{},{},{:.0},{:.3},{:.3},{:.3}",
                    r.test.name(),
                    r.size,
                    r.iters,
                    r.qps,
                    o.conn.markers as u8,
                    o.conn.crc as u8,
                    o.conn.mpa_rev,
                    r.bytes_per_sec,
                    r.lat_us[0],
                    r.lat_us[1],
                    r.lat_us[2]
                );
            }
        }
        Format::Json => {
            let items: Vec<String> = rs
                .iter()
                .map(|r| {
                    format!(
                        "{{\"test\":\"{}\",\"size\":{},\"iters\":{},\"qps\":{},\"markers\":{},\"crc\":{},\"mpa_rev\":{},\"bw_bytes_per_sec\":{:.0},\"lat_mean_us\":{:.3},\"lat_p50_us\":{:.3},\"lat_p99_us\":{:.3}}}",
                        r.test.name(),
                        r.size,
                        r.iters,
                        r.qps,
                        o.conn.markers,
                        o.conn.crc,
                        o.conn.mpa_rev,
                        r.bytes_per_sec,
                        r.lat_us[0],
                        r.lat_us[1],
                        r.lat_us[2]
                    )
                })
                .collect();
            println!("[{}]", items.join(",\n "));
        }
    }
}
