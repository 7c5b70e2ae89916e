"""seal.io: a damaged run file is named in one sentence; a run's folder name from its command line."""

import hashlib
import json

import pytest

from seal.io import DEFAULT_FOLDER, DamagedFile, folder_name, read_json, read_jsonl


def test_a_truncated_json_file_is_named_with_what_is_wrong(tmp_path):
    path = tmp_path / "metrics.json"
    whole = json.dumps({"eval_after": {"eval/bfcl_v3/avg": 0.25}, "rounds": 2})
    path.write_text(whole[:20])  # cut in the middle, as a copy cut short leaves it
    with pytest.raises(DamagedFile) as found:
        read_json(path)
    assert str(found.value) == f"{path} is damaged: it ends in the middle of a value after 20 bytes (cut short while it was written?)"
    path.write_text('{"avg": 0.')  # a number cut after its point: the parser stops at the point, the last byte
    with pytest.raises(DamagedFile, match=r"is damaged: it ends in the middle of a value after 10 bytes"):
        read_json(path)
    path.write_text("")
    with pytest.raises(DamagedFile, match=r"metrics.json is damaged: it is empty$"):
        read_json(path)
    path.write_text('{"rounds": 2} trailing')
    with pytest.raises(DamagedFile, match=r"is damaged: it is not JSON \(Extra data at line 1, column 15\)$"):
        read_json(path)
    path.write_text(whole)
    assert read_json(path)["rounds"] == 2


def test_a_torn_json_lines_file_names_its_first_bad_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"round": r, "train/reward_mean": 0.1 * r}) for r in range(3)]
    path.write_text("\n".join([lines[0], lines[1][:9], lines[2]]) + "\n")  # line 2 torn
    with pytest.raises(DamagedFile) as found:
        read_jsonl(path)
    assert str(found.value).startswith(f"{path} is damaged at line 2: it ends in the middle of a value after 9 bytes")
    path.write_text("\n".join(lines) + "\n\n")
    assert [r["round"] for r in read_jsonl(path)] == [0, 1, 2]


def test_a_folder_is_named_after_the_command_lines_overrides():
    # no override at all: a folder of its own, beside every other run (not their parent)
    assert folder_name("") == DEFAULT_FOLDER == "defaults"
    assert folder_name("backbone=tiny-random,budget=tiny") == "backbone=tiny-random,budget=tiny"
    # a name a file system cannot take (over 255 bytes) keeps its first 183 bytes and the hash of the whole
    long = ",".join(f"budget.key{i}=value{i}" for i in range(20))
    assert len(long) > 255
    expected = long[:183] + "-" + hashlib.sha256(long.encode()).hexdigest()[:16]
    assert folder_name(long) == expected and len(expected.encode()) == 200
    assert folder_name(long + "x") != expected  # another command line, another folder


def test_a_sweeps_folder_is_the_same_whatever_the_order_of_its_values():
    # Hydra sorts the keys; the values of each stay as typed: the same jobs, one folder
    assert folder_name("backbone=tiny-random,seed=2,10,1") == "backbone=tiny-random,seed=1,2,10"  # numbers by value
    assert folder_name("reweighting=off,closed_loop,seed=1,0") == "reweighting=closed_loop,off,seed=0,1"
    # a comma inside a value's brackets, parentheses or quotes is the value's: the value is sorted whole
    assert folder_name("budget.ood_benchmarks=[tau2,bfcl_v4_memory],[a],seed=0") == (
        "budget.ood_benchmarks=[a],[tau2,bfcl_v4_memory],seed=0")
    assert folder_name("seed=range(3,0),x=c,'b,a'") == "seed=range(3,0),x='b,a',c"
    assert folder_name('x=c,"a,1,b"') == 'x="a,1,b",c'  # not x=1,"a,b",c
    # and so is an escaped one; an escaped bracket or quote opens nothing
    assert folder_name(r"x=b\,a") == r"x=b\,a"
    assert folder_name(r"seed=1,0,x=a\)b") == r"seed=0,1,x=a\)b"
    assert folder_name(r"x='don\'t, please',b") == r"x='don\'t, please',b"
    # text not read as Hydra reads it (an unclosed bracket) is left as typed, never cut short
    assert folder_name("x=(a,b") == "x=(a,b" and folder_name("x=a),b") == "x=a),b"
    # ++key= and a bare ~key each start an override of their own
    assert folder_name("++b=x,++c=a") == "++b=x,++c=a" and folder_name("~db,seed=1,0") == "~db,seed=0,1"
    assert folder_name("x=nan,inf,-1,b") == "x=-1,b,inf,nan"
    # the cut name is taken after the sort: both orders of a long sweep end in the same hash
    values = [f"value{i}" for i in range(40)]
    assert folder_name("k=" + ",".join(values)) == folder_name("k=" + ",".join(reversed(values)))
