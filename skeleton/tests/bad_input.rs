//! Unusable input gives a clear error, never a panic.

use rocemesh_skeleton::{
    Endpoint, Error, InferenceConfig, Observation, Structure, SyntheticJob, basic_pairs, infer,
    skeleton_pairs,
};

fn obs(id: u32, host: u32, bytes: Vec<f64>) -> Observation {
    Observation {
        endpoint: Endpoint { id, host, rail: 0 },
        bytes,
    }
}

fn run(observations: &[Observation]) -> Result<(), Error> {
    infer(observations, &InferenceConfig::default()).map(|_| ())
}

#[test]
fn endpoint_errors() {
    assert_eq!(run(&[]), Err(Error::NoEndpoints));
    assert_eq!(
        run(&[obs(7, 0, vec![1.0; 100])]),
        Err(Error::SingleEndpoint(7))
    );
    assert_eq!(
        run(&[obs(7, 0, vec![1.0; 100]), obs(7, 1, vec![1.0; 100])]),
        Err(Error::DuplicateRnic(7))
    );
    assert_eq!(basic_pairs(&[]), Err(Error::NoEndpoints));
}

#[test]
fn series_errors() {
    let good = || obs(1, 0, vec![1.0; 100]);
    assert_eq!(
        run(&[good(), obs(2, 1, vec![])]),
        Err(Error::EmptySeries(2))
    );
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1.0] {
        let mut bytes = vec![1.0; 100];
        bytes[42] = bad;
        match run(&[good(), obs(2, 1, bytes)]) {
            Err(Error::InvalidSample {
                rnic: 2,
                index: 42,
                value,
            }) => {
                assert!(value.is_nan() == bad.is_nan() && (bad.is_nan() || value == bad))
            }
            other => panic!("{bad}: {other:?}"),
        }
    }
    assert_eq!(
        run(&[good(), obs(2, 1, vec![1.0; 99])]),
        Err(Error::LengthMismatch {
            rnic: 2,
            len: 99,
            first: 1,
            expected: 100
        })
    );
    assert_eq!(
        run(&[obs(1, 0, vec![1.0; 10]), obs(2, 1, vec![1.0; 10])]),
        Err(Error::SeriesTooShort {
            len: 10,
            window: 64
        })
    );
}

#[test]
fn constant_and_zero_series_are_not_an_error_but_fall_back() {
    let inference = infer(
        &[obs(1, 0, vec![0.0; 100]), obs(2, 1, vec![5.0; 100])],
        &InferenceConfig::default(),
    )
    .expect("valid input");
    assert!(inference.structure().is_none());
    assert_eq!(inference.pinglist(), &[(1, 2)]);
}

#[test]
fn bad_configuration_is_rejected() {
    let trace = SyntheticJob::new(8, 1, 2).generate().expect("valid job");
    let mut config = InferenceConfig::default();
    config.features.hop = 0;
    assert!(matches!(
        infer(&trace.observations, &config),
        Err(Error::InvalidParameter(_))
    ));
}

#[test]
fn skeleton_of_unknown_rnic_is_rejected() {
    let endpoints = [
        Endpoint {
            id: 1,
            host: 0,
            rail: 0,
        },
        Endpoint {
            id: 2,
            host: 1,
            rail: 0,
        },
    ];
    let structure = Structure {
        groups: vec![vec![1, 99]],
        stage_of_group: vec![0],
        dp: 2,
        tp: 1,
        pp: 1,
        period_samples: 10.0,
        separation: 5.0,
    };
    assert_eq!(
        skeleton_pairs(&endpoints, &structure),
        Err(Error::UnknownRnic(99))
    );
    let wrong_stages = Structure {
        groups: vec![vec![1, 2]],
        stage_of_group: vec![],
        ..structure
    };
    assert!(matches!(
        skeleton_pairs(&endpoints, &wrong_stages),
        Err(Error::InvalidParameter(_))
    ));
}

#[test]
fn generator_rejects_bad_parameters() {
    let bad = [
        SyntheticJob::new(0, 1, 1),
        SyntheticJob::new(2, 2, 4), // a replica of 4 GPUs cannot fill 8-RNIC hosts
        SyntheticJob {
            period_s: f64::NAN,
            ..SyntheticJob::fig8()
        },
        SyntheticJob {
            noise: -0.1,
            ..SyntheticJob::fig8()
        },
        SyntheticJob {
            samples: 0,
            ..SyntheticJob::fig8()
        },
    ];
    for job in bad {
        assert!(
            matches!(job.generate(), Err(Error::InvalidParameter(_))),
            "{job:?}"
        );
    }
}

#[test]
fn oversized_rail_is_rejected_before_any_work() {
    let observations: Vec<Observation> = (0..4097u32).map(|i| obs(i, i, vec![1.0; 64])).collect();
    assert_eq!(
        run(&observations),
        Err(Error::TooLarge {
            rail: 0,
            rnics: 4097,
            limit: 4096
        })
    );
}

#[test]
fn extreme_but_valid_inputs_do_not_panic() {
    let huge: Vec<Observation> = (0..16u32)
        .map(|i| Observation {
            endpoint: Endpoint {
                id: i,
                host: i / 8,
                rail: (i % 8) as u16,
            },
            bytes: (0..128)
                .map(|k| if k % 10 == 0 { f64::MAX } else { 0.0 })
                .collect(),
        })
        .collect();
    assert!(infer(&huge, &InferenceConfig::default()).is_ok());
    // Period of two samples: the iteration frequency is the Nyquist bin.
    let alternating: Vec<Observation> = (0..16u32)
        .map(|i| obs(i, i, (0..128).map(|k| (k % 2) as f64 * 1e9).collect()))
        .collect();
    assert!(infer(&alternating, &InferenceConfig::default()).is_ok());
    // Every RNIC on one host and rail: nothing may be grouped or probed.
    let one_host: Vec<Observation> = (0..8u32)
        .map(|i| obs(i, 0, vec![(i % 3) as f64; 64]))
        .collect();
    let inference = infer(&one_host, &InferenceConfig::default()).expect("valid input");
    assert!(inference.structure().is_none());
    assert!(inference.pinglist().is_empty());
    // Real structure, but the rails hold different RNIC counts (gcd 1).
    let mut trace = SyntheticJob::new(8, 2, 2)
        .generate()
        .expect("valid job")
        .observations;
    trace.pop();
    assert!(
        infer(&trace, &InferenceConfig::default())
            .expect("valid input")
            .structure()
            .is_none()
    );
}

#[test]
fn config_from_json_takes_defaults_and_rejects_unknown_or_bad_fields() {
    let partial: InferenceConfig = serde_json::from_str(
        r#"{"features": {"window": 128}, "fidelity": {"min_separation": 4.0}}"#,
    )
    .expect("partial config");
    assert_eq!(partial.features.window, 128);
    assert_eq!(
        partial.features.hop,
        InferenceConfig::default().features.hop
    );
    assert_eq!(partial.fidelity.min_separation, 4.0);
    assert!(serde_json::from_str::<InferenceConfig>(r#"{"features": {"windw": 128}}"#).is_err());
    let negative: InferenceConfig =
        serde_json::from_str(r#"{"grouping": {"noise_floor": -1.0}}"#).expect("well-formed JSON");
    assert!(matches!(
        negative.validate(),
        Err(Error::InvalidParameter(_))
    ));
}
