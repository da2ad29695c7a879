"""The `cdcbridge` command line as a file spark-submit can run (it runs Python files, not console scripts):

    spark-submit --master spark://head:7077 --jars <the connector jars, comma-separated> \
        deploy/spark/cdcbridge_submit.py apply --config cdcbridge.yaml

The apply job then takes the master and settings spark-submit was given and adds only what is missing."""

from cdcbridge.cli import main

main()
