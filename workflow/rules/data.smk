# Download and preparation: results/downloads/<file> (shared by experiments) -> results/{exp}/data/prepared/.
# The dataset's module (lnrepro.data.<name>, found by lnrepro.data.registry) says what to download and how to
# prepare it, so nothing here depends on which dataset is selected.
import re
import shlex

from lnrepro.data import registry
from lnrepro.paths import DOWNLOADS

# The dataset's whole section, locations included: only the downloads read the locations (data.json leaves
# them out, so a new mirror may fetch again but never changes what is prepared).
DATA_SECTION = cfg.dataset_section(config)
FETCHES = {d.name: d for d in registry.dataset(X.data.dataset).downloads(DATA_SECTION)}


rule fetch_archive:
    output:
        P.download("{file}"),
    wildcard_constraints:
        file="|".join(map(re.escape, FETCHES)) or "(?!)",  # (?!) matches nothing: a dataset without downloads
    params:
        args=lambda w: shlex.join(FETCHES[w.file].cli_args()),
    threads: res("fetch_archive").threads
    resources:
        **job_resources("fetch_archive"),
    log:
        P.log("fetch_archive", "{file}"),
    conda:
        CONDA_ENV
    shell:
        "lnrepro download {params.args} --out {output} > {log} 2>&1"


rule prepare_corpus:
    input:
        data=P.data_json,
        downloads=[P.download(name) for name in FETCHES],
    output:
        P.prepared_files,
    params:
        # check_counts is no part of data.json (it says whether to verify, not what to prepare); a param, so
        # toggling it prepares again: stats.json records whether the counts were checked.
        check="" if DATA_SECTION.get("check_counts", True) else " --no-check-counts",
    threads: res("prepare_corpus").threads
    resources:
        **job_resources("prepare_corpus"),
    log:
        P.log("prepare_corpus"),
    conda:
        CONDA_ENV
    shell:
        "lnrepro prepare --data-config {input.data} --downloads " + DOWNLOADS + " --out " + P.prepared
        + " --threads {threads}{params.check} > {log} 2>&1"


rule data:
    input:
        P.prepared_files,
