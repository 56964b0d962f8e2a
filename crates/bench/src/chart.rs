//! The run's chart, an SVG of two panels over time: throughput per call (and results turning
//! final), and latency p50 (thin) and p99 (thick) per call on a log scale.

use std::path::Path;

use anyhow::anyhow;
use plotters::prelude::*;

use crate::report::Report;

const WIDTH: u32 = 1_000;
const HEIGHT: u32 = 720;

pub fn write_svg(report: &Report, path: &Path) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let err = |e: &dyn std::fmt::Display| anyhow!("drawing {}: {e}", path.display());
    let series = &report.timeline.series;
    let max_t = series.iter().flat_map(|s| s.points.iter().map(|p| p.t_s)).fold(0.0f64, f64::max)
        + report.timeline.bucket_ms as f64 / 1_000.0;
    let max_rate =
        series.iter().flat_map(|s| s.points.iter().map(|p| p.per_sec)).fold(1.0f64, f64::max) * 1.1;
    let lat = || {
        series
            .iter()
            .filter(|s| s.has_latency)
            .flat_map(|s| s.points.iter().flat_map(|p| [p.p50_ms, p.p99_ms]))
            .flatten()
    };
    let max_lat = lat().fold(1.0f64, f64::max) * 1.5;
    let min_lat = lat().filter(|v| *v > 0.0).fold(max_lat, f64::min).max(0.01) / 1.5;

    let root = SVGBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let (top, bottom) = root.split_vertically(HEIGHT / 2);

    let mut rate = ChartBuilder::on(&top)
        .caption(
            format!("{}: throughput (requests/s per {} ms)", report.name, report.timeline.bucket_ms),
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..max_t, 0.0..max_rate)
        .map_err(|e| err(&e))?;
    rate.configure_mesh()
        .x_desc("seconds since the first request")
        .y_desc("per second")
        .draw()
        .map_err(|e| err(&e))?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        rate.draw_series(LineSeries::new(s.points.iter().map(|p| (p.t_s, p.per_sec)), color.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(s.name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
    }
    rate.configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(|e| err(&e))?;

    let mut latency = ChartBuilder::on(&bottom)
        .caption("latency (ms, log scale): p50 thin, p99 thick", ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..max_t, (min_lat..max_lat).log_scale())
        .map_err(|e| err(&e))?;
    latency
        .configure_mesh()
        .x_desc("seconds since the first request")
        .y_desc("ms")
        .draw()
        .map_err(|e| err(&e))?;
    for (i, s) in series.iter().enumerate().filter(|(_, s)| s.has_latency) {
        let color = Palette99::pick(i).to_rgba();
        let points = |pick: fn(&crate::stats::Point) -> Option<f64>| {
            s.points.iter().filter_map(move |p| pick(p).map(|v| (p.t_s, v.max(min_lat)))).collect::<Vec<_>>()
        };
        latency
            .draw_series(LineSeries::new(points(|p| p.p50_ms), color.stroke_width(1)))
            .map_err(|e| err(&e))?;
        latency
            .draw_series(LineSeries::new(points(|p| p.p99_ms), color.stroke_width(3)))
            .map_err(|e| err(&e))?
            .label(format!("{} p99", s.name))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(3)));
    }
    latency
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
