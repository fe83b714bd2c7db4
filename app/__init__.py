"""The skipcore Streamlit dashboard (run `streamlit run app/streamlit_app.py`)."""
