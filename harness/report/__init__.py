"""Reports: the typed model of one run (`model`), the folder it lives in and the order it is
written in (`store`), and one writer per format: report.json (the model itself), report.md
(`markdown`), junit.xml (`junit`), stacks.txt (`stacks`) and the terminal summary (`console`).
"""
