"""A real Prometheus for the live ops test: Debian's /usr/bin/prometheus on loopback.

Owns the temporary configuration (1 s scrape and evaluation intervals, the given rule
files, one ``kiln`` job whose static targets carry a ``namespace`` label each, as
Kubernetes service discovery would give them: one kiln deployment per namespace), the
process's lifecycle and a small client of its HTTP
API. Storage lives in the test's tmp_path; the process is killed on close.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from tests.support.net import free_port


class Prometheus:
    def __init__(self, binary: str, workdir: Path, targets: Mapping[str, Sequence[str]],
                 rule_files: Sequence[Path]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                       "evaluation_interval": "1s"},
            "rule_files": [str(p) for p in rule_files],
            "scrape_configs": [{"job_name": "kiln", "static_configs": [
                {"targets": list(group), "labels": {"namespace": namespace}}
                for namespace, group in targets.items()]}],
        }
        config_path = workdir / "prometheus.yml"
        config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
        self.log_path = workdir / "prometheus.log"
        self._log = self.log_path.open("w", encoding="utf-8")
        self.proc = subprocess.Popen(
            [binary, f"--config.file={config_path}",
             f"--storage.tsdb.path={workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=self._log, stderr=subprocess.STDOUT,
        )

    def wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"prometheus exited: {self.log()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        raise AssertionError(f"prometheus not ready after {timeout}s: {self.log()}")

    def api(self, path: str, **params: str | list[str]) -> Any:
        query = urllib.parse.urlencode(params, doseq=True)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=5) as resp:
            body = json.load(resp)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's vector (raises on a PromQL error: the API answers 400)."""
        try:
            data = self.api("query", query=expr)
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"{expr}: {exc.read().decode()}") from exc
        assert data["resultType"] == "vector", data
        result: list[dict[str, Any]] = data["result"]
        return result

    def query_range(self, expr: str, start: float, end: float, step: float = 1.0
                    ) -> list[dict[str, Any]]:
        """A range query's matrix, one value per ``step`` seconds from start to end."""
        data = self.api("query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}",
                        step=f"{step:g}")
        assert data["resultType"] == "matrix", data
        result: list[dict[str, Any]] = data["result"]
        return result

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(encoding="utf-8")[-3000:]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()
