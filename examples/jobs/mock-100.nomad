# 100 mock tasks that each "run" for 30 seconds without a process: the same file runs on Nomad.
job "mock100" {
  datacenters = ["dc1"]

  group "g" {
    count = 100

    task "t" {
      driver = "mock_driver"

      config {
        run_for = "30s"
      }

      resources {
        cpu    = 10
        memory = 10
      }
    }
  }
}
