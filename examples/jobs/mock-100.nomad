# 100 mock tasks that each "run" for 30 seconds without a process: the same file runs on Nomad.
job "mock100" {
  datacenters = ["dc1"]

  group "g" {
    count = 100

    # Without this each allocation asks for Nomad's default 300 MB of disk: 30 GB in all, more
    # than a CI machine may have free, and the last allocations would stay blocked. The logs
    # must then fit in it too (1 file of 5 MB instead of 10 of 10 MB).
    ephemeral_disk {
      size = 10
    }

    task "t" {
      driver = "mock_driver"

      config {
        run_for = "30s"
      }

      logs {
        max_files     = 1
        max_file_size = 5
      }

      resources {
        cpu    = 10
        memory = 10
      }
    }
  }
}
