"""One typed request (records.JobRequest.of_run), built in one place for run, watch, the demo and a campaign's
shards: each writes exactly the keys its jobs' state.json always had."""

from orchestrator.records import DEMO_KEYS, JobRequest

RUN = ["logs", "shapes_csv", "nk", "m_preset", "gpus", "batch", "timeout", "stall_timeout", "detach", "repeats",
       "promote", "serve_cmd", "tune_args", "q_dtype_w", "max_m", "budget", "padded_m", "table_from_log",
       "force_cu_num", "model", "tp"]


def test_runs_request_has_runs_keys_and_the_optional_ones_only_when_given():
    assert list(JobRequest.of_run().to_dict()) == RUN
    given = JobRequest.of_run(profiles=["local:t.json"], moe_tuners="both").to_dict()
    assert list(given) == RUN[:1] + ["profiles"] + RUN[1:14] + ["moe_tuners"] + RUN[14:]
    assert given["profiles"] == ["local:t.json"] and given["moe_tuners"] == "both"
    assert JobRequest.of_run().to_dict()["repeats"] == 3 and JobRequest.of_run().to_dict()["promote"] == "proven"


def test_a_watchs_request_is_runs_with_its_name():
    req = JobRequest.of_run(shapes_csv="/w/s.csv", repeats=1, promote="all", budget="1h", watch="w1").to_dict()
    assert list(req) == RUN + ["watch"]
    assert (req["shapes_csv"], req["repeats"], req["promote"], req["budget"], req["watch"]) == \
        ("/w/s.csv", 1, "all", "1h", "w1")
    assert req["logs"] == [] and req["tune_args"] == [] and req["detach"] is False and req["tp"] == 1


def test_the_demos_requests_keep_their_keys():
    one = JobRequest.of_run(DEMO_KEYS, logs=["/l"], demo_dir="/d", repeats=2, serve_cmd="x").to_dict()
    assert set(one) == {"logs", "demo_dir", "detach", "m_preset", "nk", "shapes_csv", "gpus", "batch", "timeout",
                        "repeats", "promote", "serve_cmd"}
    several = JobRequest.of_run(DEMO_KEYS[:-1], logs=["/l"], demo_nodes={"demo1": "/d1"}, repeats=2).to_dict()
    assert set(several) == set(one) - {"demo_dir", "serve_cmd"} | {"demo_nodes"}


def test_a_shard_is_the_campaigns_request_with_its_shapes():
    camp = JobRequest.of_run(logs=["/l"], nk=["1,2"], budget="2h", m_preset="pow2", variants=["a8w8"])
    camp.campaign = {"nodes": ["n1"], "sub_jobs": []}
    sub = camp.shard("/s.csv", [0, 1], "parent-job").to_dict()
    assert (sub["logs"], sub["nk"], sub["shapes_csv"], sub["m_preset"], sub["budget"], sub["detach"]) == \
        ([], [], "/s.csv", "logged", None, False)
    assert sub["campaign"] is None and sub["parent"] == "parent-job" and sub["gpus"] == [0, 1]
    assert list(sub)[:len(RUN)] == RUN and camp.campaign.nodes == ["n1"]
